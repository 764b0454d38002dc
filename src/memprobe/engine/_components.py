"""A Prober's probes and sinks: built from its options through the plugin registries,
their keys bound to its prefix, and the declarations of those keys."""

from __future__ import annotations

import os
from typing import Any

import pluggy

from .._checks import check_int, check_seconds
from .._errors import ConfigError, show
from .._plugins import ProbeInfo, collect_sinks, unknown_probe_error, unknown_sink_error
from .._registry import Declarations
from ..keys import make_key
from ._options import GUARD_OPTIONS, SCHEDULE_OPTIONS, build, guard_options
from ._scheduled import ScheduledProbe
from ._sinks import JsonlSink, Sink


def build_probes(
    spec: dict[str, dict[str, Any]], registry: dict[str, ProbeInfo], *,
    every: int, interval_seconds: float, time_limit: float | None,
) -> list[ScheduledProbe]:
    """One :class:`ScheduledProbe` per entry of ``spec`` (``{name: options}``), in order.

    On an error, the probes already built are stopped (silently) before it is raised.
    """
    out: list[ScheduledProbe] = []
    try:
        for name, opts in spec.items():
            info = registry.get(name)
            if info is None:
                raise unknown_probe_error(name, registry)
            opts = dict(opts)
            p_every = check_int(f"probes.{name}.every", opts.pop("every", every), 1)
            p_interval = check_seconds(
                f"probes.{name}.interval_seconds", opts.pop("interval_seconds", interval_seconds)
            )
            guard = guard_options(name, opts, time_limit)
            probe = build("probe", name, info.plugin, info.factory, opts,
                          ("start", "sample", "stop"), (*SCHEDULE_OPTIONS, *GUARD_OPTIONS))
            sp = ScheduledProbe(name, probe, p_every, p_interval)
            sp.time_limit, sp.max_keys, isolate = guard
            if isolate:
                sp.isolate()
            out.append(sp)
    except BaseException:
        discard(out, [])
        raise
    return out


def build_sinks(
    sink: Any, tags: dict[str, Any] | None, spec: dict[str, dict[str, Any]],
    pm: pluggy.PluginManager,
) -> list[tuple[str, Sink]]:
    """``(name, sink)`` for ``sink=`` (named ``"sink"``) and each entry of ``sinks=``."""
    out: list[tuple[str, Sink]] = []
    try:
        if sink is None:
            pass
        elif isinstance(sink, (str, os.PathLike)):
            out.append(("sink", JsonlSink(sink, tags=tags)))
        elif callable(getattr(sink, "write", None)):
            out.append(("sink", sink))
        else:
            raise ConfigError(
                "sink", f"must be a path or an object with write(), got {show(sink)}"
            )
        if spec:
            registry = collect_sinks(pm)
            for name, opts in spec.items():
                info = registry.get(name)
                if info is None:
                    raise unknown_sink_error(name, registry)
                out.append((name, build("sink", name, info.plugin, info.factory, opts,
                                        ("write", "close"))))
    except BaseException:
        discard([], out)
        raise
    return out


def discard(probes: list[ScheduledProbe], sinks: list[tuple[str, Sink]]) -> None:
    """Release what a Prober that failed half-way had built, silently."""
    for sp in probes:
        try:
            sp.probe.stop()
        except Exception:
            pass
    for _, s in sinks:
        try:
            s.close()
        except Exception:
            pass


def bind_keys(probes: list[ScheduledProbe], prefix: str) -> None:
    """Give each probe its overhead key, ``<prefix>/overhead/<name>_seconds``."""
    for sp in probes:
        sp.overhead_key = make_key(prefix, "overhead", f"{sp.name}_seconds")


def declarations(probes: list[ScheduledProbe]) -> Declarations:
    """Each probe's ``metrics`` declarations, by its name in the Prober."""
    return {sp.name: getattr(sp.probe, "metrics", None) or {} for sp in probes}
