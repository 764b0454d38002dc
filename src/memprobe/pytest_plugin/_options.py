"""The pytest plugin's options: the markers' keyword options and the session's settings,
checked once, each fault an error that names the test and the option.

Sizes go through :func:`memprobe._format.parse_size` (``"64 KB"``, ``"1.5 MiB"``,
bytes); the allowlist's patterns are :mod:`fnmatch` patterns matched against a
culprit (``app/cache.py:40``, ``lib.py:12 → numpy/...``, a type name) and against
each part of a site chain.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._checks import MAX_REPEATS
from .._errors import ConfigError, show
from .._format import parse_size

LEAK_MARKER = "memprobe_leak_check"
PEAK_MARKER = "memprobe_limit_peak"
LEAK_OPTIONS = ("repeats", "max_growth_bytes", "warmup", "metrics", "probes")
#: Repeats of a leak check when neither the marker nor ``--memprobe-leaks`` gives them.
DEFAULT_REPEATS = 50
#: Warm-up calls of a leak check when the marker gives none (fewer on fewer repeats).
DEFAULT_WARMUP = 5
#: Fewest calls a leak check judges after its warm-up (as :func:`memprobe.check_leaks`).
MIN_JUDGED = 3
#: Default tolerance when neither the marker nor the ini file gives one.
DEFAULT_MAX_GROWTH_BYTES = 100_000
#: Frames kept per traced allocation by default: enough to find the user's own line.
DEFAULT_FRAMES = 16
#: Sites listed per failing test by default.
DEFAULT_TOP = 10


@dataclass(frozen=True)
class Settings:
    """The session's settings, from the command line, else the ini file, else defaults."""

    leaks: int | None = None
    max_growth_bytes: int = DEFAULT_MAX_GROWTH_BYTES
    frames: int = DEFAULT_FRAMES
    top: int = DEFAULT_TOP
    native: bool = False
    allow: tuple[str, ...] = ()
    off: bool = False

    def allowed(self, culprit: str) -> bool:
        """True when ``culprit`` (a site chain or a type name) matches an allowlist pattern."""
        parts = [culprit, *(p.strip() for p in culprit.split("→"))]
        return any(fnmatch.fnmatchcase(p, pat) for pat in self.allow for p in parts)


def _int(value: Any, option: str, low: int, high: int) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip().replace("_", ""), 10)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(option, f"must be an int from {low} to {high}, got {show(value)}")
    return value


def settings(get_option: Any, get_ini: Any) -> Settings:
    """The session's :class:`Settings`; ``get_option(name)`` and ``get_ini(name)`` read pytest's
    config (an option of None falls back to the ini value)."""

    def pick(opt: str, ini: str) -> Any:
        value = get_option(opt)
        return (value, opt) if value is not None else (get_ini(ini), ini)

    leaks = get_option("--memprobe-leaks")
    if leaks is not None:
        leaks = _int(leaks, "--memprobe-leaks", 3, MAX_REPEATS)
    growth, where = pick("--memprobe-max-growth", "memprobe_max_growth_bytes")
    frames, fwhere = pick("--memprobe-frames", "memprobe_frames")
    top, twhere = pick("--memprobe-top", "memprobe_top")
    native = bool(get_option("--memprobe-native")) or _bool(get_ini("memprobe_native"),
                                                             "memprobe_native")
    allow = tuple(get_option("--memprobe-allow") or ()) + tuple(
        p for p in (get_ini("memprobe_allow") or ()) if p.strip())
    return Settings(
        leaks=leaks,
        max_growth_bytes=parse_size(str(growth).strip() or DEFAULT_MAX_GROWTH_BYTES, where),
        frames=_int(frames, fwhere, 1, 1000),
        top=_int(top, twhere, 1, 1000),
        native=native,
        allow=tuple(p.strip() for p in allow),
        off=bool(get_option("--memprobe-off")),
    )


def _bool(value: Any, option: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("", "0", "false", "no", "off"):
        return False
    raise ConfigError(option, f"must be true or false, got {show(value)}")


def leak_options(kwargs: Mapping[str, Any], args: Sequence[Any]) -> dict[str, Any]:
    """A leak marker's options, checked: the keyword arguments :func:`memprobe.assert_no_leak`
    takes, sizes in bytes. Raises :class:`ConfigError` naming the option at fault."""
    if args:
        raise ConfigError(LEAK_MARKER, f"takes keyword arguments only ({', '.join(LEAK_OPTIONS)}),"
                          f" got {show(args[0])}")
    for name in kwargs:
        if name not in LEAK_OPTIONS:
            close = difflib.get_close_matches(name, LEAK_OPTIONS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(LEAK_MARKER, f"unknown option {name!r}; {hint}"
                              f"known: {', '.join(LEAK_OPTIONS)}")
    opts = dict(kwargs)
    if "repeats" in opts:
        opts["repeats"] = _int(opts["repeats"], "repeats", 3, MAX_REPEATS)
    if "max_growth_bytes" in opts:
        opts["max_growth_bytes"] = parse_size(opts["max_growth_bytes"], "max_growth_bytes")
    if "warmup" in opts:
        w = opts["warmup"]
        if not (w is None or w == "auto"):
            w = _int(w, "warmup", 0, MAX_REPEATS - 1)
        opts["warmup"] = w
    from .._registry import check_metric_names, installed_declarations

    if "metrics" in opts:
        m = opts["metrics"]
        if isinstance(m, str) or not isinstance(m, (list, tuple)) or not m or not all(
                isinstance(x, str) and x for x in m):
            raise ConfigError("metrics", "must be a non-empty list of metric names such as "
                              f"'process/rss_bytes', got {show(m)}")
        opts["metrics"] = check_metric_names("metrics", m)
    if "probes" in opts:
        p = opts["probes"]
        names = list(p) if isinstance(p, (list, tuple, Mapping)) else None
        if names is None or isinstance(p, str) or not all(isinstance(x, str) and x
                                                          for x in names):
            raise ConfigError("probes", "must be a list of probe names or a dict of probe "
                              f"name to options, got {show(p)}")
        installed = installed_declarations()
        for name in names:
            if name not in installed:
                from .._plugins import unknown_probe_error

                raise unknown_probe_error(name, installed)
    return opts


def with_warmup(opts: dict[str, Any]) -> dict[str, Any]:
    """A leak check's options with its warm-up: the marker's, else :data:`DEFAULT_WARMUP`
    calls or as many as leave :data:`MIN_JUDGED` of the repeats to judge (so that every
    ``repeats`` from 3 runs). Raises :class:`ConfigError` naming ``warmup`` when the
    marker's leaves fewer."""
    repeats = opts.get("repeats", DEFAULT_REPEATS)
    if "warmup" not in opts:
        return {**opts, "warmup": max(0, min(DEFAULT_WARMUP, repeats - MIN_JUDGED))}
    w = opts["warmup"]
    if isinstance(w, int) and repeats - w < MIN_JUDGED:
        raise ConfigError("warmup", f"{w} warm-up calls of {repeats} repeats leave "
                          f"{max(0, repeats - w)} to judge; give at most {repeats - MIN_JUDGED}"
                          f" (or repeats of {w + MIN_JUDGED} or more)")
    return opts


def peak_limit(kwargs: Mapping[str, Any], args: Sequence[Any]) -> int:
    """The peak marker's limit in bytes: ``memprobe_limit_peak("24 MB")``."""
    given = [*args, *kwargs.values()]
    unknown = [k for k in kwargs if k != "limit"]
    if unknown or len(given) != 1:
        raise ConfigError(PEAK_MARKER, 'takes one size, e.g. memprobe_limit_peak("24 MB"), '
                          f"got {show(tuple(args))} {show(dict(kwargs))}")
    return parse_size(given[0], "limit")


@dataclass
class Judged:
    """One test's result, as the session summary reads it (JSON, so xdist can carry it)."""

    nodeid: str
    failed: bool
    metric: str = ""
    headline: str = ""
    culprit: str = ""
    growth_bytes: float = 0.0
    allowed: list[str] = field(default_factory=list)
    refused: str = ""
