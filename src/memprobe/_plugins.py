"""The plugin manager: built-in probes and entry-point plugins, one path for both."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pluggy

from . import hookspecs
from ._errors import ConfigError, PluginWarning, did_you_mean, show

#: The entry-point group third-party plugins declare.
ENTRY_POINT_GROUP = "memprobe"
#: Comma-separated plugin names that are not loaded (built-in or entry point).
DISABLE_ENV = "MEMPROBE_DISABLE_PLUGINS"

_BUILTINS = {
    "process": "memprobe.probes.process",
    "gc": "memprobe.probes.gc",
    "tracemalloc": "memprobe.probes.tracemalloc",
    "objects": "memprobe.probes.objects",
    "malloc": "memprobe.probes.malloc",
    "smaps": "memprobe.probes.smaps",
    "memray": "memprobe.probes.memray",
}


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
    def metrics(self) -> dict[str, str]:
        """The metrics the probe documents (``metrics`` class attribute), key to description."""
        return dict(getattr(self.factory, "metrics", {}) or {})


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


def _disabled(extra: Iterable[str] | None) -> set[str]:
    names = {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}
    return names | set(extra or ())


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
    skip = _disabled(disable)
    for name, modname in _BUILTINS.items():
        if name not in skip:
            pm.register(importlib.import_module(modname), name=name)
    if load_entrypoints:
        _load_entrypoints(pm, skip)
    return pm


def _load_entrypoints(pm: _PluginManager, skip: set[str]) -> None:
    seen: set[tuple[str, str, str]] = set()
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None) or "<unknown distribution>"
        if (dist, ep.name, ep.value) in seen:  # the same dist found twice on sys.path
            continue
        seen.add((dist, ep.name, ep.value))
        if ep.name in skip:
            continue
        what = f"memprobe plugin {ep.name!r} ({ep.value}) from distribution {dist!r}"
        if pm.get_plugin(ep.name) is not None:
            taken = pm.distributions.get(ep.name)
            by = f"distribution {taken!r}" if taken else "memprobe (a built-in)"
            _report(f"{what} was not loaded: a plugin of that name is already registered "
                    f"by {by}")
            continue
        try:
            plugin = ep.load()
        except (Exception, SystemExit) as exc:  # a plugin's import must not end the job
            _report(f"{what} could not be imported: {type(exc).__name__}: {exc}")
            continue
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


def collect_probes(pm: pluggy.PluginManager) -> dict[str, ProbeInfo]:
    """Call every plugin's ``memprobe_register_probes`` and return the registry.

    A probe name registered twice keeps the first registration; the second is
    reported (once per process) with a :class:`PluginWarning` naming both
    plugins. A plugin whose hook raises is reported and skipped.
    """
    registry: dict[str, ProbeInfo] = {}
    for impl in pm.hook.memprobe_register_probes.get_hookimpls():  # registration order
        plugin_name = impl.plugin_name

        def register(name: str, factory: Callable[..., Any], _plugin: str = plugin_name) -> None:
            if not isinstance(name, str) or not name:
                raise ConfigError(
                    "register", f"probe name must be a non-empty str, got {show(name)}"
                )
            if not callable(factory):
                raise ConfigError(name, f"probe factory {factory!r} is not callable")
            if name in registry:
                _report(
                    f"probe {name!r} registered by {_origin(pm, _plugin)} is ignored: "
                    f"{_origin(pm, registry[name].plugin)} registered it first"
                )
                return
            registry[name] = ProbeInfo(name, factory, _plugin)

        try:
            impl.function(register=register)
        except (Exception, SystemExit) as exc:
            _report(
                f"memprobe {_origin(pm, plugin_name)} failed in memprobe_register_probes "
                f"and registers no probes: {type(exc).__name__}: {exc}"
            )
    return registry


def unknown_probe_error(name: str, known: Iterable[str]) -> ConfigError:
    """A ConfigError for an unknown probe name, with close-match suggestions."""
    known = sorted(known)
    hint = did_you_mean(name, known, n=3, cutoff=0.5)
    hint = f"; {hint}" if hint else ""
    return ConfigError(
        "probes", f"unknown probe {name!r}{hint} (installed: {', '.join(known)})"
    )
