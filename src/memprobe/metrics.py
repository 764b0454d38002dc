"""Metrics described as data: each probe declares, per metric, its unit and its kind.

A probe class declares ``metrics = {pattern: Metric(...)}``. A pattern is a
metric name relative to the probe (``rss_bytes``), where ``<name>`` stands for
one open-ended part (``top/<site>/size_bytes``, ``gen<N>/count``). A plain
``str`` value is a description with the default unit and kind.

Readers of metrics (the RLlib adapter's reduce choice, the CLI's units, the
Prometheus export) ask :func:`describe` and never parse names themselves.

**The default for an undeclared metric**: a gauge whose unit comes from the
name's Prometheus-style suffix (``_bytes``: bytes, ``_seconds``: seconds,
``_count``: count, ``fraction``: fraction), else no unit.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: How a metric's values relate over time.
#:
#: - ``gauge``: a level now (rss, fds, live bytes at a site).
#: - ``counter``: cumulative in its process, never decreasing (collections, errors).
#: - ``interval``: an amount for the time since the previous sample (gc time
#:   spent, a probe's own cost, growth since the previous sample).
Kind = Literal["gauge", "counter", "interval"]
KINDS: tuple[Kind, ...] = ("gauge", "counter", "interval")
#: Base units (Prometheus conventions); ``""`` for a dimensionless number.
Unit = Literal["bytes", "seconds", "count", "fraction", ""]
UNITS: tuple[Unit, ...] = ("bytes", "seconds", "count", "fraction", "")
#: The kinds of growth a metric can tell on its own when it grows (what
#: :data:`memprobe.KINDS` describes in words); ``""`` for a metric whose growth is
#: explained by the metrics beside it (rss: Python's, native, mapped files...).
Growth = Literal["fds", "mmap", "python", "objects", "native", "fragmentation", "threads", ""]
GROWTHS: tuple[Growth, ...] = ("fds", "mmap", "python", "objects", "native", "fragmentation",
                               "threads", "")


@dataclass(frozen=True)
class Metric:
    """The declaration of one metric: what it is, in which unit, of which kind.

    ``judged``: the leak verdicts judge it by default (:func:`memprobe.analyze_samples`
    without ``metrics``, ``memprobe report``, the alarm), when a sample has it.
    ``growth``: the kind of leak its growth is on its own (``num_fds``: ``"fds"``),
    or ``""`` when the metrics beside it tell (rss).
    """

    description: str = ""
    unit: Unit = ""
    kind: Kind = "gauge"
    judged: bool = False
    growth: Growth = ""

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {self.unit!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.growth not in GROWTHS:
            raise ValueError(f"growth must be one of {GROWTHS}, got {self.growth!r}")
        if not isinstance(self.judged, bool):
            raise ValueError(f"judged must be a bool, got {self.judged!r}")


_SUFFIX_UNITS: tuple[tuple[str, Unit], ...] = (
    ("_bytes", "bytes"),
    ("_seconds", "seconds"),
    ("_count", "count"),
    ("fraction", "fraction"),
)


def default_metric(name: str, description: str = "") -> Metric:
    """The declaration an undeclared metric gets: a gauge, its unit from the name's suffix."""
    for suffix, unit in _SUFFIX_UNITS:
        if name.endswith(suffix):
            return Metric(description, unit=unit)
    return Metric(description)


#: The Prober's own sections (:data:`memprobe.keys.PROBER_SECTIONS`), declared here.
PROBER_METRICS: Mapping[str, Mapping[str, Metric]] = {
    "overhead": {
        "sample_seconds": Metric("wall time of the sample's probes and the Prober's work "
                                 "between them (not the history or sinks)", "seconds",
                                 "interval"),
        "<probe>_seconds": Metric("time the probe's sample() took", "seconds", "interval"),
        "fraction": Metric("probe time over wall time since the first sample, once that "
                            "window is 1 s long", "fraction"),
        "check_retained_bytes": Metric(
            "memory the leak alarm's checks kept (malloc's bytes in use across each "
            "check, where glibc gives them; else the resident size), since start: "
            "memprobe's, judged apart from the user's", "bytes"),
    },
    "errors": {"<name>": Metric("failures of a probe or plugin since start", "count", "counter")},
    "timeouts": {"<probe>": Metric("samples over the probe's time limit", "count", "counter")},
    "leak": {
        "suspect": Metric("1 while a metric of this process is judged leaking, else 0"),
        "rate_per_hour": Metric("growth rate of the worst leaking metric", "bytes"),
        "hours_to_oom": Metric("hours until the resident size reaches the nearest memory "
                               "limit (cgroup, Ray's memory monitor, the machine) at its judged "
                               "rate; -1 when it is not judged leaking or no limit can be read"),
    },
}


@functools.lru_cache(maxsize=1024)
def _pattern(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"<[^<>/]*>", pattern)
    return re.compile(".+".join(re.escape(p) for p in parts) + r"\Z", re.S)


def as_metric(name: str, declared: Any) -> Metric:
    """A declaration as a :class:`Metric` (a ``str`` is a description, defaults otherwise)."""
    if isinstance(declared, Metric):
        return declared
    return default_metric(name, str(declared) if declared is not None else "")


def declared_name(declarations: Mapping[str, Any] | None, metric: str) -> str | None:
    """The name among a probe's ``metrics`` that declares ``metric`` (itself, or the
    longest pattern that matches it), or None."""
    if declarations:
        if metric in declarations:
            return metric
        best: str | None = None
        for pattern in declarations:
            if "<" in pattern and _pattern(pattern).match(metric):
                if best is None or len(pattern) > len(best):
                    best = pattern
        return best
    return None


def lookup(declarations: Mapping[str, Any] | None, metric: str) -> Metric:
    """The declaration of ``metric`` among a probe's ``metrics``, or the default.

    An exact name wins over a pattern; among patterns, the longest wins.
    """
    name = declared_name(declarations, metric)
    if name is not None and declarations:
        return as_metric(metric, declarations[name])
    return default_metric(metric)
