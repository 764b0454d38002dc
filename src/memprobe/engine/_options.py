"""The Prober's options: their shapes, their checks, and building probes from them.

Every check raises :class:`memprobe.ConfigError` naming the option at fault
(``probes.tracemalloc.every``) and says what it must be.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Union

from .._checks import (
    check_bool,
    check_int,
    check_limit,
    hint,
)
from .._errors import ConfigError, ProbeError, show

#: The probes a Prober runs when none are named: cheap enough to leave on.
DEFAULT_PROBES = ("process", "gc")
#: Options every probe accepts in ``probes={name: {...}}``, handled by the Prober.
SCHEDULE_OPTIONS = ("every", "interval_seconds")
#: Options every probe accepts that guard the caller against a hostile probe.
GUARD_OPTIONS = ("time_limit_seconds", "isolate", "max_keys")
#: The most keys one probe may return in one sample unless its ``max_keys`` says otherwise.
DEFAULT_MAX_KEYS = 10_000
ProbesOption = Union[Iterable[str], Mapping[str, Union[Mapping[str, Any], None]], None]


def check_tags(tags: Any, sink: Any) -> dict[str, Any] | None:
    """``tags=``: a JSON-serializable mapping of str keys, for a path sink only."""
    if tags is None:
        return None
    if not isinstance(sink, (str, os.PathLike)):
        raise ConfigError("tags", "only apply when sink is a path (a JSONL file); "
                          f"got sink={sink!r}")
    from ._sinks import check_jsonl_tags

    return check_jsonl_tags("tags", tags)


def guard_options(
    name: str, opts: dict[str, Any], default_limit: float | None
) -> tuple[float | None, int, bool]:
    """Pop and check a probe's guard options: (time limit, max keys, isolate)."""
    limit = opts.pop("time_limit_seconds", default_limit)
    if limit is not None:
        limit = check_limit(f"probes.{name}.time_limit_seconds", limit)
    max_keys = check_int(f"probes.{name}.max_keys", opts.pop("max_keys", DEFAULT_MAX_KEYS), 1)
    isolate = check_bool(f"probes.{name}.isolate", opts.pop("isolate", False))
    if isolate and limit is None:
        raise ConfigError(
            f"probes.{name}.isolate",
            "needs a time limit: give time_limit_seconds (for the probe or the Prober)",
        )
    return limit, max_keys, isolate


def _named_options(
    what: str, spec: Any, option: str
) -> dict[str, dict[str, Any]]:
    """``{name: options}`` from a mapping of names to option mappings (or None)."""
    out: dict[str, dict[str, Any]] = {}
    for name, opts in spec.items():
        if not isinstance(name, str):
            raise ConfigError(option, f"{what} names must be str, got {show(name)}")
        if opts is None:
            opts = {}
        if not isinstance(opts, Mapping):
            raise ConfigError(f"{option}.{name}", f"options must be a mapping, got {show(opts)}")
        for k in opts:
            if not isinstance(k, str):
                raise ConfigError(f"{option}.{name}", f"option names must be str, got {show(k)}")
        out[name] = dict(opts)
    return out


def parse_probes(probes: ProbesOption) -> dict[str, dict[str, Any]]:
    """Normalize a ``probes=`` option to ``{name: options}``.

    ``None`` gives :data:`DEFAULT_PROBES`; a list of names gives each with no
    options; a mapping ``{name: options or None}`` is checked and copied.

    :raises ConfigError: a bad shape, a name that is not a str, a name given twice.
    """
    if probes is None:
        return {name: {} for name in DEFAULT_PROBES}
    if isinstance(probes, str):
        raise ConfigError("probes", f"must be a list of names or a mapping, got the str {probes!r}")
    if isinstance(probes, Mapping):
        return _named_options("probe", probes, "probes")
    try:
        names = list(probes)
    except TypeError:
        raise ConfigError(
            "probes", f"must be a list of names or a mapping, got {show(probes)}"
        ) from None
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        if not isinstance(name, str):
            raise ConfigError("probes", f"probe names must be str, got {show(name)}")
        if name in out:
            raise ConfigError("probes", f"probe {name!r} is named twice")
        out[name] = {}
    return out


def parse_sinks(sinks: Any) -> dict[str, dict[str, Any]]:
    """Normalize a ``sinks=`` option (``{name: options or None}``) to ``{name: options}``."""
    if sinks is None:
        return {}
    if not isinstance(sinks, Mapping):
        raise ConfigError("sinks", f"must be a mapping of sink names to options, got {show(sinks)}")
    return _named_options("sink", sinks, "sinks")


def bad_options(
    factory: Callable[..., Any], options: Mapping[str, Any], exc: TypeError,
    also_known: Sequence[str] = (),
) -> str:
    """What is wrong with the options a factory refused: unknown names, with suggestions."""
    import inspect

    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return f"bad options {dict(options)!r}: {exc}"
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return f"bad options {dict(options)!r}: {exc}"
    known = sorted([*params, *also_known])
    for name in options:
        if name not in params:
            return f"unknown option {name!r}{hint(name, known)} (options: {', '.join(known)})"
    return f"bad options {dict(options)!r}: {exc}"


def build(
    kind: str, name: str, plugin: str, factory: Callable[..., Any], options: Mapping[str, Any],
    methods: Sequence[str], also_known: Sequence[str] = (),
) -> Any:
    """Call a probe's or sink's factory with its options; check the object has ``methods``.

    :param kind: ``"probe"`` or ``"sink"``: the option path is ``<kind>s.<name>``.
    :raises ConfigError: a bad option, or an object without one of ``methods``.
    :raises ProbeError: the factory raised anything else.
    """
    option = f"{kind}s.{name}"
    try:
        obj = factory(**options)
    except ConfigError:
        raise
    except TypeError as exc:
        raise ConfigError(option, bad_options(factory, options, exc, also_known)) from exc
    except Exception as exc:
        raise ProbeError(
            name, f"the {kind} factory from plugin {plugin!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    for method in methods:
        if not callable(getattr(obj, method, None)):
            raise ConfigError(option, f"the {kind} from plugin {plugin!r} has no {method}() method")
    return obj
