"""Leak checks that drive a Prober: call a function repeatedly and judge the series.

:func:`check_leaks` returns the :class:`~memprobe.Report`; :func:`assert_no_leak`
raises :class:`~memprobe.LeakError` in a test. Both sit above the Prober; the
verdicts themselves are :mod:`memprobe.leak._verdicts`, the statistics :mod:`memprobe.trend`.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import struct
import time
import tracemalloc
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._checks import MAX_REPEATS
from ._errors import ConfigError, LeakError, show
from ._pid import getpid
from ._registry import check_metric_names
from ._sample import Sample
from ._sitestats import default_filters, site_stats
from .engine._prober import Prober
from .keys import make_key, site_metric
from .leak._kinds import FILTERED, KINDS, classify
from .leak._verdicts import DEFAULT_METRICS, Report, Verdict, analyze, analyze_samples
from .probes import malloc
from .probes.tracemalloc import acquire_tracing, release_tracing

__all__ = [
    "DEFAULT_METRICS",
    "LeakError",
    "Report",
    "Verdict",
    "analyze",
    "analyze_samples",
    "assert_no_leak",
    "check_growth_bytes",
    "check_leaks",
    "check_warmup",
    "judge_tolerance",
]

#: One double: the cells of check_leaks' columns.
_DOUBLE = struct.Struct("d")
#: Frames kept per traced allocation in check_leaks: enough to find the user's
#: own line above a library's (see ``group_by="user"`` in :mod:`memprobe._sitestats`).
_NFRAME = 16
#: malloc's bytes in use: a native leak served from heap the program freed before grows
#: them by all of it, while the resident size, the freed pages reused, reads levelled off.
IN_USE = "malloc/in_use_bytes"
#: What :func:`assert_no_leak` judges unless told otherwise (``malloc/in_use_bytes``
#: where the ``malloc`` probe runs: Linux with glibc 2.33+).
CHECKED_METRICS = (FILTERED, "process/rss_bytes", IN_USE)


def check_probes() -> dict[str, dict[str, Any]]:
    """The probes a leak check samples unless told otherwise: ``process``, and ``malloc``
    where the C library tells its bytes in use (elsewhere it is left out, not warned
    about at every check)."""
    return {"process": {}, "malloc": {}} if malloc.supported() else {"process": {}}


def check_leaks(
    fn: Callable[[], Any],
    *,
    repeats: int = 50,
    warmup: str | int | None = 5,
    probes: Sequence[str] | Mapping[str, Mapping[str, Any] | None] | None = None,
    tracemalloc_top: int | None = 20,
    collect: bool = True,
    thresholds: Mapping[str, float] | None = None,
    prefix: str = "memprobe",
    **options: Any,
) -> Report:
    """Call ``fn()`` ``repeats`` times, sampling after each call, and judge the series.

    A step is one call. A growth of less than ``min_growth_bytes`` (16 KiB), or
    ``min_growth_fraction`` (here 0.01%) of the resident size, over the calls judged
    is "growing slightly", not a leak (see :func:`memprobe.analyze_samples`).

    :param warmup: calls whose samples are dropped (an int), ``"auto"`` or None.
    :param probes: Prober probes sampled after each call (default: process, and malloc
        where it runs: Linux with glibc 2.33+); add ``"objects"`` to rank types too.
    :param tracemalloc_top: trace allocations and judge the ``N`` largest sites
        (None: do not trace). A site in a library or the standard library is
        named with the caller's own line before it
        (``my_env.py:26 → numpy/_core/numeric.py:232``).
        ``tracemalloc/filtered_bytes``, the bytes traced *outside memprobe's own
        files*, is judged, so the samples this function keeps do not look like a
        leak (``tracemalloc/traced_bytes`` is recorded but not judged).
    :param collect: ``gc.collect()`` before each sample, so garbage in cycles
        does not look like growth.
    :param thresholds: tolerated growth per call, by metric (see :func:`memprobe.analyze_samples`).
    :param prefix: the prefix of the keys in the report.
    :param options: passed to :func:`memprobe.analyze_samples`.
    """
    if not callable(fn):
        raise ConfigError("fn", f"must be callable, got {show(fn)}")
    if not isinstance(repeats, int) or isinstance(repeats, bool) or not (
            3 <= repeats <= MAX_REPEATS):
        raise ConfigError("repeats", f"must be an int from 3 to {MAX_REPEATS}, "
                          f"got {show(repeats)}")
    if tracemalloc_top is not None and (
        not isinstance(tracemalloc_top, int) or tracemalloc_top < 1
    ):
        raise ConfigError(
            "tracemalloc_top", f"must be None or an int >= 1, got {show(tracemalloc_top)}"
        )
    check_warmup(warmup, repeats)
    if probes is None:
        probes = check_probes()
    opts = dict(options)
    dropped = warmup if isinstance(warmup, int) else 0
    opts.setdefault("min_points", min(20, max(3, repeats - dropped)))
    opts.setdefault("step", "call")
    # One call, then gc.collect(), then a sample: the allocator's creep between
    # samples is small, so the floor here is min_growth_bytes plus 0.01% of rss,
    # not the 0.5% that samples taken by time in a running job need.
    opts.setdefault("min_growth_fraction", 1e-4)
    prober = Prober(probes, history=1, load_entrypoints=False, prefix=prefix)
    filters = default_filters()
    # The series go into columns allocated once per key, not into new objects per
    # call: what this loop keeps must not grow with the calls, or it would show as
    # growth itself (more traced blocks, a larger copy of the traces each sample,
    # rss ratcheting up; more live objects). A column is a bytearray of doubles,
    # which the gc does not track: keys keep appearing during the run (the objects
    # probe's growth/<type> keys), and an array.array per new key would be counted
    # by the objects probe as growth of its own.
    nan = float("nan")
    times = array("d", [nan]) * repeats
    empty_column = _DOUBLE.pack(nan) * repeats
    columns: dict[str, bytearray] = {}
    site_keys: dict[str, str] = {}
    pack_into = _DOUBLE.pack_into
    traced_key = make_key(prefix, "tracemalloc", "traced_bytes")
    filtered_key = make_key(prefix, "tracemalloc", "filtered_bytes")

    def put(key: str, i: int, v: float) -> None:
        col = columns.get(key)
        if col is None:
            col = columns[key] = bytearray(empty_column)
        pack_into(col, i * 8, v)

    # glibc's per-thread cache, filled before each sample, holds the same at each: what
    # it kept of the call's freed chunks would read as malloc's bytes in use growing.
    fill_cache = malloc.fill_thread_cache if "malloc" in prober.probe_names else None
    if tracemalloc_top is not None:
        acquire_tracing(_NFRAME)
    try:
        with prober:
            if collect:
                gc.collect()
            for i in range(repeats):
                fn()
                if collect:
                    gc.collect()
                if fill_cache is not None:
                    fill_cache()
                for k, v in prober.sample(step=i, force=True).items():
                    put(k, i, v)
                if tracemalloc_top is not None:
                    stats = site_stats("user", filters)
                    put(traced_key, i, tracemalloc.get_traced_memory()[0])
                    put(filtered_key, i, sum(sz for sz, _ in stats.values()))
                    ranked = sorted(stats.items(), key=lambda kv: -kv[1][0])[:tracemalloc_top]
                    for site, (sz, _) in ranked:
                        key = site_keys.get(site)
                        if key is None:
                            key = site_keys[site] = make_key(
                                prefix, "tracemalloc", site_metric("top", site, "size_bytes"))
                        put(key, i, sz)
                    del stats, ranked
                times[i] = time.time()
    finally:
        if tracemalloc_top is not None:
            release_tracing()
    pid = getpid()
    series = {k: memoryview(c).cast("d").tolist() for k, c in columns.items()}
    samples = [
        Sample(times[i], i, pid, {k: c[i] for k, c in series.items() if c[i] == c[i]})
        for i in range(repeats)
    ]
    return analyze_samples(samples, prefix=prefix, thresholds=thresholds, warmup=warmup, **opts)


#: Fewest calls judged after the warm-up: fewer cannot tell a trend.
_MIN_JUDGED = 3


def check_warmup(warmup: Any, repeats: int) -> None:
    """A warm-up in calls leaves at least 3 of ``repeats`` calls to judge, else
    :class:`ConfigError` naming ``warmup``: a check with nothing to judge passes
    whatever leaks."""
    if isinstance(warmup, int) and not isinstance(warmup, bool) and warmup >= 0:
        if repeats - warmup < _MIN_JUDGED:
            raise ConfigError(
                "warmup", f"{warmup} warm-up calls of {repeats} repeats leave "
                f"{max(0, repeats - warmup)} calls to judge; give repeats >= warmup + "
                f"{_MIN_JUDGED} (here {warmup + _MIN_JUDGED})")


def check_growth_bytes(max_growth_bytes: Any, option: str = "max_growth_bytes") -> float:
    """A growth tolerance in bytes: a number >= 0, else :class:`ConfigError` naming ``option``."""
    if (
        isinstance(max_growth_bytes, bool)
        or not isinstance(max_growth_bytes, (int, float))
        or not max_growth_bytes >= 0
    ):
        raise ConfigError(option, f"must be a number >= 0, got {show(max_growth_bytes)}")
    return max_growth_bytes


def assert_no_leak(
    fn: Callable[[], Any],
    *,
    repeats: int = 50,
    max_growth_bytes: float = 100_000,
    warmup: str | int | None = 5,
    metrics: Sequence[str] = CHECKED_METRICS,
    probes: Sequence[str] | Mapping[str, Mapping[str, Any] | None] | None = None,
    **options: Any,
) -> Report:
    """Call ``fn()`` repeatedly and raise :class:`LeakError` if memory keeps growing.

    A ``_bytes`` metric in ``metrics`` fails when it grows significantly (the
    lower bound of its slope above 0, not levelled off) by more than
    ``max_growth_bytes`` over the calls judged (after ``warmup``), whatever the
    floor under which growth is only "growing slightly". Counts
    (``process/num_fds``, ``objects/total_count``) listed in ``metrics``
    tolerate no growth. How many repeats catch a leak of N bytes per call:
    docs/leaks.md. ``metrics`` are by default Python's traced bytes, the resident size and
    malloc's bytes in use (:data:`CHECKED_METRICS`; the last where the ``malloc`` probe
    runs, which then samples by default): a native leak served from heap the program
    freed before grows the bytes in use while the resident size reads levelled off.

    :returns: the :class:`Report` when nothing leaks.
    :raises LeakError: naming the metrics that grew, the kind of growth and the culprits.
    :raises ConfigError: ``warmup`` leaves fewer than 3 of the ``repeats`` calls to judge;
        ``repeats`` is not from 3 to 100,000; a name in ``metrics`` that no probe declares.
    """
    metrics = check_metric_names("metrics", metrics)
    check_growth_bytes(max_growth_bytes)
    check_warmup(warmup, repeats)
    if probes is None:
        probes = check_probes()
        if "objects/total_count" in metrics:
            probes["objects"] = {"top": 20}
    thresholds = {m: 0.0 for m in metrics}
    report = check_leaks(
        fn, repeats=repeats, warmup=warmup, probes=probes, thresholds=thresholds, **options
    )
    report = judge_tolerance(report, metrics, max_growth_bytes)
    failing = [v for m in metrics if (v := report.get(m)) is not None and v.leaking]
    if failing:
        raise LeakError(_leak_message(failing, report, repeats, max_growth_bytes), report)
    return report


def judge_tolerance(report: Report, metrics: Sequence[str], max_growth: float) -> Report:
    """The report with every ``_bytes`` metric of ``metrics`` that grew significantly by
    more than ``max_growth`` judged a leak (with its kind and culprits), and every one
    that grew less not: the tolerance decides, not the report's floor for "slight"."""
    growing = ("leak", "slight")
    sites = tuple(v.site or "" for v in report.sites if v.status in growing)
    types = tuple(v.site or "" for v in report.types if v.status in growing)
    by_metric = {v.metric: v for v in report.verdicts.values()}
    verdicts = dict(report.verdicts)
    for m in metrics:
        v = report.get(m)
        if v is None or v.unit != "bytes" or v.status not in growing:
            continue
        if v.growth > max_growth:
            kind, culprits, note = classify(v.metric, by_metric, sites, types, holders=sites)
            verdicts[v.key] = dataclasses.replace(
                v, status="leak", kind=kind, culprits=culprits, note=note)
        else:
            verdicts[v.key] = dataclasses.replace(v, status="slight")
    return dataclasses.replace(report, verdicts=verdicts)


def _leak_message(failing: list[Verdict], report: Report, repeats: int, max_growth: float) -> str:
    lines = [f"memory keeps growing over {repeats} calls (tolerated: {max_growth:g} bytes):"]
    for v in failing:
        lines.append(
            f"  {v.metric}: {v.slope_per_step:+.1f}/call, "
            f"+{v.growth:.0f} over {v.n_points} calls" + (f" ({v.note})" if v.note else "")
        )
    if report.kind:
        lines.append(f"kind: {report.kind} ({KINDS[report.kind]})")
    sus = [v for v in (*report.sites, *report.types) if v.status in ("leak", "slight")][:10]
    if sus:
        lines.append("culprits (fastest-growing first):")
        lines += [f"  {v.site}: {v.slope_per_step:+.1f}/call" for v in sus]
    return "\n".join(lines)
