"""Every hook a memprobe plugin can implement.

A plugin is a module or object with functions marked ``@memprobe.hookimpl``
whose names are among the hooks below. It is found through the entry-point
group ``memprobe``::

    [project.entry-points.memprobe]
    myprobe = "my_package.plugin"

The reference documentation (``docs/plugins.md``) is checked against this
module by a test, so the docstrings here are the documentation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import pluggy

from ._sample import Number, Sample
from .metrics import Metric

hookspec = pluggy.HookspecMarker("memprobe")
hookimpl = pluggy.HookimplMarker("memprobe")


class Prober(Protocol):
    """What a hook is given as ``prober``: the :class:`memprobe.Prober` that took the
    sample, typed by the part of it a hook may use (so that this module, which the
    probes import, imports no engine)."""

    prefix: str

    @property
    def history(self) -> Sequence[Sample]: ...

    @property
    def probe_names(self) -> list[str]: ...

    def describe(self, key: str) -> Metric: ...

    def sample(self, step: int | None = None, *, force: bool = False) -> dict[str, Number]: ...

# -------------------------------------------------------------------------
# registering probes
# -------------------------------------------------------------------------


@hookspec
def memprobe_register_probes(register: Callable[..., None]) -> None:
    """Register the probes this plugin contributes.

    Call ``register(name, factory)`` once per probe. ``factory(**options)``
    must return an object with ``start()``, ``sample() -> Mapping`` and
    ``stop()``; the options are those the user gives for this probe name in
    ``Prober(probes={name: {...}})``.

    :param register: the function to call, ``register(name: str, factory)``.
    :returns: nothing; what counts is what was registered.

    Called once for each plugin when a :class:`memprobe.Prober` (or
    ``memprobe probes``) first needs the probe registry.
    """


@hookspec
def memprobe_register_sinks(register: Callable[..., None]) -> None:
    """Register the sinks this plugin contributes: where finished samples are exported.

    Call ``register(name, factory)`` once per sink. ``factory(**options)``
    must return an object with ``write(sample)`` and ``close()`` (a
    :class:`memprobe.Sink`); the options are those the user gives in
    ``Prober(sinks={name: {...}})``. A bad option is a ``TypeError`` (reported
    as a :class:`memprobe.ConfigError` naming the option) or a ``ConfigError``
    raised by the factory.

    Exporting samples (to a file, a metrics backend) is what sinks are for;
    ``memprobe_sample_end`` is for observing them. The built-in ``jsonl``
    sink (options ``path`` and ``tags``) is registered through this hook.

    :param register: the function to call, ``register(name: str, factory)``.
    :returns: nothing; what counts is what was registered.

    Called once for each plugin when a :class:`memprobe.Prober` is given ``sinks=``.
    """


# -------------------------------------------------------------------------
# around a sample
# -------------------------------------------------------------------------


@hookspec
def memprobe_sample_flattened(
    values: Mapping[str, float], prober: Prober
) -> Mapping[str, Any] | None:
    """Derive extra metrics from a flattened sample.

    :param values: the flat metrics of this sample, ``{"memprobe/process/rss_bytes": ...}``.
        Read only: add metrics by returning them.
    :param prober: the :class:`memprobe.Prober` that took the sample.
    :returns: ``None``, or a mapping of flat keys to finite numbers to merge
        into the sample. Keys must not overwrite existing ones.

    Called after every sample in which at least one probe ran, after the
    probes' results were flattened and before the sample is stored or written.
    A call of ``prober.sample()`` from here returns ``{}`` at once (counted in
    ``<prefix>/errors/reentrant``).
    """


@hookspec
def memprobe_sample_end(sample: Sample, prober: Prober) -> None:
    """Observe a finished sample (export it with a sink: ``memprobe_register_sinks``).

    :param sample: the finished :class:`memprobe.Sample` (time, step, pid, values).
    :param prober: the :class:`memprobe.Prober` that took it.
    :returns: nothing.

    Called after each sample is stored in ``prober.history`` and written to
    the sinks. An exception here is counted under ``<prefix>/errors/<plugin>``
    and does not reach the caller. A call of ``prober.sample()`` from here
    returns ``{}`` at once (counted in ``<prefix>/errors/reentrant``).
    """
