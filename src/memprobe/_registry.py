"""What a key is: its declaration (unit, kind, whether it is judged, the growth it tells),
answered from the probes that declare it.

Every reader asks here: the Prober (its probes' instances), ``memprobe report``
(the installed probes), the Ray export and the RLlib adapter (through
``prober.describe``). A declaration comes from the probe's ``metrics``, from
:data:`memprobe.metrics.PROBER_METRICS` for the Prober's own sections, else
:func:`memprobe.metrics.default_metric`. Nothing else reads a unit from a name.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from ._errors import ConfigError, did_you_mean, show
from .keys import PROBER_SECTIONS, split_key, split_short
from .metrics import PROBER_METRICS, Metric, as_metric, declared_name, default_metric, lookup

__all__ = [
    "Declarations",
    "builtin_declarations",
    "check_metric_names",
    "describe_key",
    "growth_kinds",
    "installed_declarations",
    "judged_metrics",
]

#: Per probe name, its ``metrics`` declarations (a probe without any maps to ``{}``).
Declarations = Mapping[str, Mapping[str, Any]]


def describe_key(key: str, prefix: str, declarations: Declarations | None = None) -> Metric:
    """The declaration of ``key`` (written under ``prefix``): its description, unit and kind.

    :param declarations: per probe name, its ``metrics``; default: the installed
        probes' (entry-point plugins included).

    The Prober's sections come from :data:`~memprobe.metrics.PROBER_METRICS`; a key
    that is not ``<prefix>/<probe>/<metric>`` or whose probe is unknown gets
    :func:`~memprobe.metrics.default_metric`.
    """
    if declarations is None:
        declarations = installed_declarations()
    try:
        parts = split_key(key, prefix)
    except ValueError:
        return default_metric(key)
    if parts.probe in PROBER_SECTIONS:
        return lookup(PROBER_METRICS[parts.probe], parts.metric)
    return lookup(declarations.get(parts.probe), parts.metric)


def _judged(declarations: Declarations) -> list[tuple[str, Metric]]:
    return [(f"{probe}/{name}", m) for probe, decl in declarations.items()
            if probe not in PROBER_SECTIONS
            for name, d in (decl or {}).items()
            if "<" not in name and (m := as_metric(name, d)).judged]


def judged_metrics(declarations: Declarations) -> tuple[str, ...]:
    """``<probe>/<metric>`` of every metric declared ``judged=True``, in declaration order."""
    return tuple(short for short, _ in _judged(declarations))


def growth_kinds(declarations: Declarations) -> dict[str, str]:
    """``{<probe>/<metric>: growth}`` of the judged metrics that tell a growth on their own."""
    return {short: m.growth for short, m in _judged(declarations) if m.growth}


def _probe_declarations(load_entrypoints: bool, on_warning: Callable[[str], None] | None
                        ) -> dict[str, Mapping[str, Any]]:
    decl: dict[str, Mapping[str, Any]] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            from ._plugins import collect_probes, get_plugin_manager

            pm = get_plugin_manager(load_entrypoints=load_entrypoints)
            for name, info in collect_probes(pm).items():
                decl.setdefault(name, dict(getattr(info.factory, "metrics", {}) or {}))
        except Exception:  # a broken plugin: its metrics get the default declaration
            pass
    if on_warning is not None:
        for w in caught:
            on_warning(str(w.message))
    return decl


@functools.lru_cache(maxsize=1)
def builtin_declarations() -> Declarations:
    """The declarations of memprobe's own probes (no entry point loaded)."""
    return _probe_declarations(False, None)


_INSTALLED: Declarations | None = None


def installed_declarations(on_warning: Callable[[str], None] | None = None) -> Declarations:
    """The declarations of every installed probe, entry-point plugins included; read once.

    :param on_warning: called with the text of each plugin warning given while the
        plugins load (a plugin slow to import, one that fails); default: dropped.
    """
    global _INSTALLED
    if _INSTALLED is None:
        _INSTALLED = _probe_declarations(True, on_warning)
    return _INSTALLED


def check_metric_names(option: str, metrics: Any,
                       declarations: Declarations | None = None) -> tuple[str, ...]:
    """``metrics`` as a tuple of ``<probe>/<metric>`` names that a probe declares (default:
    the installed probes'; a probe that declares no metrics takes any name of its own).

    A misspelt name would never be in a sample, so nothing would be judged under it and
    a leak would pass: it is refused, with the closest declared names.

    :raises ConfigError: not a list of str, or a name no probe declares.
    """
    if isinstance(metrics, str) or not isinstance(metrics, (list, tuple)) or not all(
            isinstance(m, str) for m in metrics):
        raise ConfigError(option, f"must be a list of metric names such as "
                          f"'process/rss_bytes', got {show(metrics)}")
    if declarations is None:
        declarations = installed_declarations()
    every = {**declarations, **PROBER_METRICS}
    for name in metrics:
        probe, metric = split_short(name)
        decl = every.get(probe)
        if decl is not None and metric and (not decl or declared_name(decl, metric)):
            continue
        known = [f"{p}/{m}" for p, d in every.items() for m in d]
        hint = did_you_mean(name, known, n=3, cutoff=0.5)
        raise ConfigError(option, f"no probe declares the metric {name!r}"
                          + (f"; {hint}" if hint else "; metrics are '<probe>/<metric>'"))
    return tuple(metrics)
