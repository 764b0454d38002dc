"""The hooks around a sample, and the failures of plugins, sinks and the alarm."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import pluggy

from .._errors import MetricValueError, ProbeFailedWarning
from .._flatten import check_number
from .._plugins import plugin_label
from .._sample import Number, Sample
from ..keys import make_key


class SampleHooks:
    """Calls the plugins' ``memprobe_sample_flattened`` and ``memprobe_sample_end`` hooks.

    A hook that raises, or returns what cannot be merged, is counted in
    :attr:`errors` under its plugin's registered name and warned about once;
    the sample goes on. Sinks and the leak alarm report their failures here too.

    A plugin's ``sys.exit()`` is such a failure too: it never ends the caller's loop.

    :ivar errors: failures by plugin (or sink) name since the Prober was made.
    :ivar current: the plugin or sink being called now, or None.
    """

    def __init__(self, pm: pluggy.PluginManager, prefix: str) -> None:
        self._pm = pm
        self._prefix = prefix
        self.errors: dict[str, int] = {}
        self.derive: list[Any] = []
        self.end: list[Any] = []
        self.current: str | None = None
        self._reentered: set[str] = set()

    def collect(self) -> None:
        """Read the hook implementations (once, when the Prober starts)."""
        self.derive = self._pm.hook.memprobe_sample_flattened.get_hookimpls()
        self.end = self._pm.hook.memprobe_sample_end.get_hookimpls()

    def failed(self, name: str, hook: str, exc: BaseException) -> None:
        """Count a failure of ``name`` in ``hook``; warn the first time."""
        first = name not in self.errors
        self.errors[name] = self.errors.get(name, 0) + 1
        if first:
            warnings.warn(
                f"memprobe plugin {name!r} failed in {hook}: {type(exc).__name__}: {exc}; "
                f"counted in {make_key(self._prefix, 'errors', name)}",
                ProbeFailedWarning,
                stacklevel=6,
            )

    def reentered(self) -> None:
        """``prober.sample()`` was called inside a sample: warn the first time a plugin
        or sink does it (a signal handler, which is no plugin, is only counted)."""
        name = self.current
        if name is not None and name not in self._reentered:
            self._reentered.add(name)
            warnings.warn(
                f"memprobe plugin {name!r} called prober.sample() inside a sample; the "
                f"call returned {{}} at once, counted in "
                f"{make_key(self._prefix, 'errors', 'reentrant')}",
                ProbeFailedWarning,
                stacklevel=3,
            )

    def run_derive(self, values: dict[str, Number], prober: Any) -> None:
        """Merge what each ``memprobe_sample_flattened`` returns into ``values``."""
        for impl in self.derive:
            self.current = plugin_label(impl)
            try:
                extra = impl.function(values=dict(values), prober=prober)
                if extra is None:
                    continue
                if not isinstance(extra, Mapping):
                    raise MetricValueError(plugin_label(impl), "returned a non-mapping")
                checked = {}
                for k, v in extra.items():
                    if not isinstance(k, str):
                        raise MetricValueError(repr(k), "derived metric key is not a str")
                    if k in values:
                        raise MetricValueError(k, "derived metric would overwrite a probe's metric")
                    checked[k] = check_number(k, v)
                values.update(checked)
            except (Exception, SystemExit) as exc:  # a plugin's sys.exit() too
                self.failed(plugin_label(impl), "memprobe_sample_flattened", exc)
            finally:
                self.current = None

    def run_end(self, sample: Sample, prober: Any) -> None:
        """Call each ``memprobe_sample_end``."""
        for impl in self.end:
            self.current = plugin_label(impl)
            try:
                impl.function(sample=sample, prober=prober)
            except (Exception, SystemExit) as exc:  # a plugin's sys.exit() too
                self.failed(plugin_label(impl), "memprobe_sample_end", exc)
            finally:
                self.current = None
