"""``memprobe run --probe-option PROBE.OPTION=VALUE``: a probe's options on the command line.

Each ``--probe-option`` gives one option of one probe named in ``--probes``, as
``probes={PROBE: {OPTION: VALUE}}`` gives it to a :class:`memprobe.Prober`:
``--probe-option memray.native_traces=true``, ``--probe-option tracemalloc.nframe=16``.
The value is read as JSON (``true``, ``16``, ``0.5``, ``null``, ``["*/vendor/*"]``,
``"16"``), else as the plain string (``tracemalloc.group_by=lineno``). Every option
is checked before any file is opened, and an error names the ``--probe-option`` at
fault: an unknown probe, a probe not in ``--probes``, an unknown option, a bad value.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._errors import ConfigError, did_you_mean, show

__all__ = ["FLAG", "parse_probe_options", "refused_by_probe"]

FLAG = "--probe-option"
#: Options every probe takes, handled by the Prober (its schedule and its guards).
COMMON_OPTIONS = ("every", "interval_seconds", "time_limit_seconds", "isolate", "max_keys")


def parse_value(text: str) -> Any:
    """A value as JSON when it is JSON, else the string itself: ``true`` is True, ``16``
    is 16, ``lineno`` is ``"lineno"``. ``True``/``False``/``None`` as Python writes them
    are read as the JSON words."""
    word = {"True": "true", "False": "false", "None": "null"}.get(text.strip(), text)
    try:
        return json.loads(word)
    except ValueError:
        return text


def _options_of(factory: Callable[..., Any]) -> list[str] | None:
    """The keyword options a probe's factory takes, or None when it takes any."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]


def parse_probe_options(
    given: Sequence[str], probes: Sequence[str], factories: Mapping[str, Callable[..., Any]],
) -> dict[str, dict[str, Any]]:
    """``{probe: {option: value}}`` from the ``--probe-option`` values ``given``.

    :param probes: the probes ``--probes`` names.
    :param factories: the installed probes' factories, by name.
    :raises ConfigError: naming ``--probe-option`` and what it got wrong.
    """
    out: dict[str, dict[str, Any]] = {}
    for text in given:
        name, eq, raw = text.partition("=")
        probe, dot, option = name.strip().partition(".")
        if not (eq and dot and probe and option):
            raise ConfigError(FLAG, f"must be PROBE.OPTION=VALUE (memray.native_traces=true), "
                              f"got {show(text)}")
        at = f"{FLAG} {probe}.{option}"
        if probe not in factories:
            hint = did_you_mean(probe, sorted(factories), n=3, cutoff=0.5)
            raise ConfigError(at, f"unknown probe {probe!r}{'; ' + hint if hint else ''} "
                              f"(installed: {', '.join(sorted(factories))})")
        if probe not in probes:
            raise ConfigError(at, f"the {probe} probe is not in --probes "
                              f"({','.join(probes)}); add it there")
        known = _options_of(factories[probe])
        if known is not None and option not in known and option not in COMMON_OPTIONS:
            every = sorted({*known, *COMMON_OPTIONS})
            hint = did_you_mean(option, every)
            raise ConfigError(at, f"the {probe} probe has no option {option!r}"
                              f"{'; ' + hint if hint else ''} (its options: {', '.join(every)})")
        opts = out.setdefault(probe, {})
        if option in opts:
            raise ConfigError(at, "is given twice")
        opts[option] = parse_value(raw)
    return out


def refused_by_probe(exc: ConfigError, options: Mapping[str, Mapping[str, Any]]) -> ConfigError:
    """A probe's (or the Prober's) refusal of an option given with ``--probe-option``,
    as the command line's error naming it; ``exc`` itself when it is about no such option
    (``memray.native_traces`` or ``probes.memray.every`` name ``memray``'s options)."""
    where = exc.option.removeprefix("probes.")
    probe, _, option = where.partition(".")
    if option in options.get(probe, {}):
        return ConfigError(f"{FLAG} {probe}.{option}", exc.message)
    return exc
