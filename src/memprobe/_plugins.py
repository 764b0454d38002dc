"""The plugin manager: built-in probes and sinks and entry-point plugins, one path for all."""

from __future__ import annotations

import importlib
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pluggy

from . import hookspecs
from ._errors import ConfigError, PluginWarning, did_you_mean, show
from .metrics import Metric, as_metric

#: The entry-point group third-party plugins declare (found by :mod:`memprobe._entrypoints`).
ENTRY_POINT_GROUP = "memprobe"
#: Comma-separated plugin names that are not loaded (built-in or entry point).
DISABLE_ENV = "MEMPROBE_DISABLE_PLUGINS"

_BUILTINS = {
    "process": "memprobe.probes.process",
    "gc": "memprobe.probes.gc",
    "tracemalloc": "memprobe.probes.tracemalloc",
    "objects": "memprobe.probes.objects",
    "jsonl": "memprobe.engine._sinks",
    "malloc": "memprobe.probes.malloc",
    "smaps": "memprobe.probes.smaps",
    "memray": "memprobe.probes.memray",
    "heap": "memprobe.probes.heap",
}
#: An entry point that takes longer than this to import is reported (it is not stopped:
#: an import cannot be interrupted safely in the importing process).
SLOW_IMPORT_SECONDS = 1.0


@dataclass(frozen=True)
class ProbeInfo:
    """A registered probe: its name, its factory and the plugin that registered it."""

    name: str
    factory: Callable[..., Any]
    plugin: str

    @property
    def doc(self) -> str:
        """The first line of the factory's docstring."""
        return ((self.factory.__doc__ or "").strip().splitlines() or [""])[0]

    @property
    def metrics(self) -> dict[str, Metric]:
        """The metrics the probe declares (its ``metrics`` class attribute), pattern to
        :class:`memprobe.metrics.Metric` (a ``str`` declaration gets the defaults)."""
        declared = getattr(self.factory, "metrics", None) or {}
        if not isinstance(declared, Mapping):
            return {}
        return {str(k): as_metric(str(k), v) for k, v in declared.items()}


@dataclass(frozen=True)
class SinkInfo:
    """A registered sink: its name, its factory and the plugin that registered it."""

    name: str
    factory: Callable[..., Any]
    plugin: str


# Plugin faults are reported once per process, however many Probers (each with
# its own plugin manager) meet them: the messages already warned about.
_REPORTED: set[str] = set()


def _report(message: str) -> None:
    if message in _REPORTED:
        return
    _REPORTED.add(message)
    warnings.warn(message, PluginWarning, stacklevel=3)


class _PluginManager(pluggy.PluginManager):
    """pluggy's PluginManager that remembers which distribution each plugin came from."""

    def __init__(self) -> None:
        super().__init__(ENTRY_POINT_GROUP)
        #: plugin name -> distribution name, for plugins loaded from entry points
        self.distributions: dict[str, str] = {}


def _origin(pm: pluggy.PluginManager, plugin_name: str) -> str:
    dist = getattr(pm, "distributions", {}).get(plugin_name)
    return f"plugin {plugin_name!r}" + (f" from distribution {dist!r}" if dist else "")


def disabled_by_env() -> set[str]:
    """The plugin names in ``MEMPROBE_DISABLE_PLUGINS``, lower-cased (names match in any case)."""
    return {n.strip().lower() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}


def plugin_label(impl: Any) -> str:
    """The name a hook implementation's plugin was registered under; for a plugin
    registered without one (pluggy names it by its id), its module or class name."""
    name = str(impl.plugin_name)
    plugin = impl.plugin
    if name == str(id(plugin)):
        return str(getattr(plugin, "__name__", None) or type(plugin).__name__)
    return name


def get_plugin_manager(
    *, load_entrypoints: bool = True, disable: Iterable[str] | None = None
) -> pluggy.PluginManager:
    """A fresh plugin manager with the built-in probes and, by default, entry-point plugins.

    :param load_entrypoints: load plugins from the entry-point group ``memprobe``.
    :param disable: plugin names to skip, added to those in ``MEMPROBE_DISABLE_PLUGINS``.

    A plugin that fails to import, whose entry point names a missing or wrong
    object (one without memprobe hooks), whose name is taken, or whose hooks
    do not match memprobe's, is reported once per process with a
    :class:`PluginWarning` naming its distribution; the others still load.
    """
    pm = _PluginManager()
    pm.add_hookspecs(hookspecs)
    from_env = disabled_by_env()
    skip = from_env | {n.lower() for n in disable or ()}
    for name, modname in _BUILTINS.items():
        if name not in skip:
            pm.register(importlib.import_module(modname), name=name)
    found = set(_BUILTINS)
    if load_entrypoints:
        found |= _load_entrypoints(pm, skip)
    unknown = sorted(from_env - found)
    if unknown and load_entrypoints:
        _report(f"{DISABLE_ENV} names {', '.join(map(repr, unknown))}, which "
                f"{'is' if len(unknown) == 1 else 'are'} not an installed plugin "
                f"(plugins: {', '.join(sorted(found))})")
    return pm


def _entry_points() -> Iterable[Any]:
    from ._entrypoints import entry_points

    return entry_points()


def _load_entrypoints(pm: _PluginManager, skip: set[str]) -> set[str]:
    """Load the entry-point plugins not in ``skip``; return all entry-point names, lower-cased."""
    seen: set[tuple[str, str, str]] = set()
    names: set[str] = set()
    for ep in _entry_points():
        dist = (getattr(ep, "dist_name", None) or getattr(getattr(ep, "dist", None), "name", None)
                or "<unknown distribution>")
        if (dist, ep.name, ep.value) in seen:  # the same dist found twice on sys.path
            continue
        seen.add((dist, ep.name, ep.value))
        names.add(ep.name.lower())
        if ep.name.lower() in skip:
            continue
        what = f"memprobe plugin {ep.name!r} ({ep.value}) from distribution {dist!r}"
        if pm.get_plugin(ep.name) is not None:
            taken = pm.distributions.get(ep.name)
            by = f"distribution {taken!r}" if taken else "memprobe (a built-in)"
            _report(f"{what} was not loaded: a plugin of that name is already registered "
                    f"by {by}")
            continue
        t0 = time.perf_counter()
        try:
            plugin = ep.load()
        except (Exception, SystemExit) as exc:  # a plugin's import must not end the job
            _report(f"{what} could not be imported: {type(exc).__name__}: {exc}")
            continue
        took = time.perf_counter() - t0
        if took > SLOW_IMPORT_SECONDS:
            _report(f"{what} took {took:.1f} s to import (memprobe loads entry points when "
                    f"the first Prober is made; set {DISABLE_ENV}={ep.name} to skip it)")
        try:
            pm.register(plugin, name=ep.name)
        except Exception as exc:
            _report(f"{what} could not be registered: {type(exc).__name__}: {exc}")
            continue
        callers = pm.get_hookcallers(plugin) or []
        unknown = sorted(c.name for c in callers if not c.has_spec())
        if unknown or not callers:
            pm.unregister(plugin)
            known = sorted(n for n in dir(hookspecs) if n.startswith("memprobe_"))
            if unknown:
                hint = did_you_mean(unknown[0], known)
                hint = f" ({hint})" if hint else ""
                why = f"implements unknown hook {unknown[0]!r}{hint}"
            else:
                why = f"{plugin!r} has no memprobe hooks (marked @memprobe.hookimpl)"
            _report(f"{what} was not loaded: {why}; hooks are {', '.join(known)}")
            continue
        pm.distributions[ep.name] = dist
    return names


def _collect(pm: pluggy.PluginManager, what: str, make: Callable[..., Any]) -> dict[str, Any]:
    """Call every plugin's ``memprobe_register_<what>s`` hook and return the registry.

    A name registered twice keeps the first registration; the second is
    reported (once per process) with a :class:`PluginWarning` naming both
    plugins. A plugin whose hook raises is reported and skipped.
    """
    registry: dict[str, Any] = {}
    hook = getattr(pm.hook, f"memprobe_register_{what}s", None)
    if hook is None:  # a plugin manager without memprobe's hook specs
        return registry
    for impl in hook.get_hookimpls():  # registration order
        plugin_name = plugin_label(impl)

        def register(name: str, factory: Callable[..., Any], _plugin: str = plugin_name) -> None:
            if not isinstance(name, str) or not name:
                raise ConfigError(
                    "register", f"{what} name must be a non-empty str, got {show(name)}"
                )
            if not callable(factory):
                raise ConfigError(name, f"{what} factory {factory!r} is not callable")
            if name in registry:
                _report(
                    f"{what} {name!r} registered by {_origin(pm, _plugin)} is ignored: "
                    f"{_origin(pm, registry[name].plugin)} registered it first"
                )
                return
            registry[name] = make(name, factory, _plugin)

        try:
            impl.function(register=register)
        except (Exception, SystemExit) as exc:
            _report(
                f"memprobe {_origin(pm, plugin_name)} failed in memprobe_register_{what}s "
                f"and registers no {what}s: {type(exc).__name__}: {exc}"
            )
    return registry


def collect_probes(pm: pluggy.PluginManager) -> dict[str, ProbeInfo]:
    """The probe registry: ``memprobe_register_probes`` of every plugin, in order."""
    return _collect(pm, "probe", ProbeInfo)


def collect_sinks(pm: pluggy.PluginManager) -> dict[str, SinkInfo]:
    """The sink registry: ``memprobe_register_sinks`` of every plugin, in order."""
    return _collect(pm, "sink", SinkInfo)


def _unknown(what: str, name: str, known: Iterable[str]) -> ConfigError:
    known = sorted(known)
    if name.lower() in disabled_by_env():
        return ConfigError(
            f"{what}s", f"unknown {what} {name!r}: it is disabled by {DISABLE_ENV}="
            f"{os.environ.get(DISABLE_ENV, '')!r} (installed: {', '.join(known)})"
        )
    hint = did_you_mean(name, known, n=3, cutoff=0.5)
    hint = f"; {hint}" if hint else ""
    return ConfigError(
        f"{what}s", f"unknown {what} {name!r}{hint} (installed: {', '.join(known)})"
    )


def unknown_probe_error(name: str, known: Iterable[str]) -> ConfigError:
    """A ConfigError for an unknown probe name: close matches, or the variable that disabled it."""
    return _unknown("probe", name, known)


def unknown_sink_error(name: str, known: Iterable[str]) -> ConfigError:
    """A ConfigError for an unknown sink name: close matches, or the variable that disabled it."""
    return _unknown("sink", name, known)
