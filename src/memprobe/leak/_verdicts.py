"""Verdicts: turn a metric's history into a status, a kind of growth and a culprit.

```pycon
>>> xs = list(range(100))
>>> v = analyze(xs, [1000 + 64 * x for x in xs], key="rss_bytes")
>>> v.status, v.slope_per_step
('leak', 64.0)
>>> analyze(xs, [1000 + (x % 7) for x in xs]).status
'ok'

```

A series is judged after its warm-up (:func:`memprobe.trend.auto_warmup`). Its
trend is *significant* when the lower bound of the slope's interval is above
``threshold_per_step`` and the growth over the window exceeds ``effect_sigmas``
times the robust noise. A significant trend is ``"levelled"`` when the last
half of the window no longer grows, ``"slight"`` when it grew less than
``min_growth`` (too small to act on), ``"insufficient"`` on fewer than
2 x ``min_points`` points with ``warmup="auto"`` (too few to tell from a warm-up),
else ``"leak"``. Otherwise it is ``"ok"``, or ``"levelled"`` when its warm-up
grew. :func:`analyze_samples` names the kind (:data:`KINDS`) and culprits of a leak.
A step is one sample (one call in :func:`memprobe.check_leaks`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._errors import ConfigError, show
from .._flatten import OTHER
from .._format import fmt_value
from .._registry import describe_key, installed_declarations
from .._sample import Sample
from ..keys import (
    DEFAULT_PREFIX,
    format_culprit,
    infer_prefix,
    key_of,
    make_key,
    short_key,
)
from ..trend import auto_warmup, bin_medians, median, robust_noise, theil_sen
from . import _garbage, _kinds, _windows
from ._scales import SAMPLE_ORDER_NOTE, floor_level, judge_scales, steps_usable
from ._series import FORECAST, judged_keys, sample_series, site_probe
from ._tiers import Tiers
from ._verdict import STATUS_WORDS, Report, Status, Verdict

__all__ = [
    "DEFAULT_METRICS",
    "KINDS",
    "LEAK_OPTIONS",
    "STATUS_WORDS",
    "Report",
    "Verdict",
    "analyze",
    "analyze_samples",
    "format_culprit",
]

KINDS, DEFAULT_METRICS = _kinds.KINDS, _kinds.DEFAULT_METRICS

#: Option names :func:`analyze_samples` accepts (its own and :func:`analyze`'s),
#: for callers that pass options through (``Prober(leak_options=...)``).
LEAK_OPTIONS = frozenset({
    "metrics", "thresholds", "threshold_per_step", "sites", "min_growth_bytes",
    "min_growth_fraction", "step", "warmup", "min_points", "confidence", "effect_sigmas",
    "max_points", "autocorrelation", "min_rate_fraction_per_hour",
})

_LATE_MIN_POINTS = 10  # points the last-half check of analyze() needs
_LATE_FRACTION = 1 / 3  # a late rate under this part of the rate judged: levelled off
#: A growth made of fewer jumps than this (rises between the points judged that stand
#: out of their noise), and of nothing once they are taken out, is "slight": a few
#: plateaus that stepped up (a cache resized, a pool grown) are a few events; a leak
#: is many. The slowest leak the alarm is meant to find (0.05% of a 500 MiB process
#: per 1,000 samples) passes the 0.5% floor in ~10 of the kernel's 256 KiB rss steps;
#: a healthy staircase of 6 steps of 2 MiB stays "slight" (docs/leaks.md).
MIN_RISES = 8
#: A rise that lifts the series by less than this share of the floor (``min_growth``)
#: is no step of its own: it is not counted, and stays in the series, judged with the
#: rest against the floor. A creep of small rises (a healthy allocator's high-water
#: mark: 20-150 KiB each against a floor of 2.5 MiB) then reads as few steps at every
#: resolution, as the RLlib adapter's live alarm on 40 points reads it (at 80 points
#: each small rise was a jump of its own); a leak's steps are counted as before (the
#: kernel's 256 KiB steps are a tenth of a 500 MiB process's floor).
STEP_FLOOR_SHARE = 1 / 16
_JUMP_SIGMAS = 4.0  # a jump: a rise this many robust deviations above the typical one


def _jumps(ys: Sequence[float]) -> list[int]:
    """Indexes ``i`` of the jumps ``ys[i + 1] - ys[i]``: rises that stand out from the
    series' typical change (above its median by :data:`_JUMP_SIGMAS` robust deviations).
    On a staircase with flat treads every rise is one; on a steady climb, hardly any."""
    d = [b - a for a, b in zip(ys, ys[1:])]
    if len(d) < 3:
        return []
    mid = median(d)
    spread = 1.4826 * median([abs(x - mid) for x in d])
    return [i for i, x in enumerate(d) if x > 0 and x > mid + _JUMP_SIGMAS * spread]


def _rises(ys: Sequence[float], min_lift: float) -> list[list[int]]:
    """The rises of ``ys``, each as the indexes of its jumps (:func:`_jumps`; jumps in a
    row are one rise: a step that falls inside a point, a bin's median between its two
    sides, makes two), that lift the series by ``min_lift`` or more (a jump's lift: its
    change less the series' typical change)."""
    d = [b - a for a, b in zip(ys, ys[1:])]
    rises: list[list[int]] = []
    for i in _jumps(ys):
        if rises and rises[-1][-1] == i - 1:
            rises[-1].append(i)
        else:
            rises.append([i])
    if not rises:
        return []
    typical = median(d)
    return [r for r in rises if sum(d[i] - typical for i in r) >= min_lift]


def _few_steps(rx: Sequence[float], ry: Sequence[float], confidence: float,
               autocorrelation: bool, threshold_per_step: float, min_growth: float) -> int:
    """The number of rises (:func:`_rises`, of :data:`STEP_FLOOR_SHARE` of
    ``min_growth`` or more) a growth is made of when they are fewer than
    :data:`MIN_RISES` and the series without them (each taken out of every later point)
    no longer grows past ``min_growth`` significantly; 0 otherwise (a leak's steady
    growth)."""
    found = _rises(ry, STEP_FLOOR_SHARE * max(min_growth, 0.0))
    rises = len(found)
    if not rises or rises >= MIN_RISES:
        return 0
    jumps = {i for r in found for i in r}
    d = [b - a for a, b in zip(ry, ry[1:])]
    typical = median(d)
    flat, lift = [ry[0]], 0.0
    for i, x in enumerate(d):
        lift += x - typical if i in jumps else 0.0
        flat.append(ry[i + 1] - lift)
    slope, low, _, _ = theil_sen(rx, flat, confidence, autocorrelation=autocorrelation)
    left = slope * (rx[-1] - rx[0])
    return rises if low <= threshold_per_step or left < max(min_growth, 0.0) else 0


def _check_series(key: str, xs: Sequence[float], ys: Sequence[float]) -> None:
    if len(xs) != len(ys):
        raise ConfigError("xs/ys", f"{key or 'series'}: {len(xs)} x values but {len(ys)} y values")
    for v in (*xs, *ys):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError("xs/ys", f"{key or 'series'}: not a finite number: {v!r}")


def _warmup_points(warmup: Any, xs: Sequence[float], ys: Sequence[float], min_points: int) -> int:
    if warmup == "auto":
        return auto_warmup(xs, ys, min_points)
    if warmup is None:
        return 0
    if isinstance(warmup, int) and not isinstance(warmup, bool) and warmup >= 0:
        return min(warmup, len(xs))
    raise ConfigError("warmup", f"must be None, 'auto' or an int >= 0, got {show(warmup)}")


def analyze(
    xs: Sequence[float],
    ys: Sequence[float],
    *,
    key: str = "",
    times: Sequence[float] | None = None,
    warmup: str | int | None = "auto",
    min_points: int = 20,
    threshold_per_step: float = 0.0,
    min_growth: float = 0.0,
    confidence: float = 0.95,
    effect_sigmas: float = 2.0,
    max_points: int = 80,
    autocorrelation: bool = True,
    prefix: str = "",
    step: str = "sample",
    min_rate_per_hour: float = 0.0,
    unit: str | None = None,
) -> Verdict:
    """Judge whether the series ``ys`` over ``xs`` (steps) grows.

    :param key: the metric's key, copied into the verdict.
    :param times: unix seconds of each point, for ``rate_per_hour``.
    :param warmup: points to drop first: an int, ``None`` (none) or
        ``"auto"`` (the plateau after initial growth, see :func:`memprobe.trend.auto_warmup`).
    :param min_points: fewer points than this (after warm-up) is "insufficient".
    :param threshold_per_step: growth per step that is tolerated; a leak is
        significantly above it.
    :param min_growth: a significant growth over the window smaller than this is
        ``"slight"``, not a leak (0: significance alone decides).
    :param confidence: of the slope's interval (two-sided).
    :param effect_sigmas: the fitted growth over the window must exceed this
        many times the residual noise.
    :param max_points: longer series are reduced to this many bin medians first.
    :param autocorrelation: widen the slope's interval for serially correlated
        noise (Hamed-Rao, see :func:`memprobe.trend.autocorrelation_factor`).
    :param prefix: the prefix of ``key``, copied into the verdict.
    :param step: what one step is (``"sample"``, ``"call"``), for the reports.
    :param min_rate_per_hour: with ``times``, a slower significant growth is ``"slight"``.
    :param unit: the metric's unit, copied into the verdict; default: the declaration of
        ``key`` among the installed probes' (:class:`memprobe.Metric`).

    A growth that the warm-up took and that then stopped is ``"levelled"``, with the
    note ``grew X, then stopped``, whatever its size: never ``"slight"`` or ``"ok"``.
    """
    _check_series(key, xs, ys)
    if not 0 < confidence < 1:
        raise ConfigError("confidence", f"must be in (0, 1), got {show(confidence)}")
    if not isinstance(min_points, int) or min_points < 3:
        raise ConfigError("min_points", f"must be an int >= 3, got {show(min_points)}")
    if not isinstance(max_points, int) or max_points < min_points:
        raise ConfigError("max_points", f"must be an int >= min_points, got {show(max_points)}")
    if times is not None and len(times) != len(xs):
        raise ConfigError("times", f"{key or 'series'}: {len(times)} times for {len(xs)} points")
    if unit is None:
        unit = describe_key(key, prefix, installed_declarations()).unit
    axis_note = ""
    if not steps_usable(xs, min_points):
        xs, step, axis_note = [float(i) for i in range(len(xs))], "sample", SAMPLE_ORDER_NOTE
    n = len(xs)
    k = _warmup_points(warmup, xs, ys, min_points)
    ux, uy = xs[k:], ys[k:]
    used = n - k
    if used < min_points:
        return Verdict(key, "insufficient", 0.0, 0.0, 0.0, None, used, k, prefix=prefix, step=step,
                       unit=unit, confidence=confidence, note=axis_note)
    rx, ry = bin_medians(ux, uy, max_points)
    slope, low, high, icpt = theil_sen(rx, ry, confidence, autocorrelation=autocorrelation)
    sigma = robust_noise(rx, ry, slope, icpt)
    growth = slope * (ux[-1] - ux[0])
    rate = None
    if times is not None:
        dt = times[-1] - times[k]
        if dt > 0:
            rate = growth / dt * 3600.0
    status: Status
    steps = 0  # the jumps a growth judged "slight" is made of (see _few_steps)
    if low > threshold_per_step and growth > effect_sigmas * sigma and slope > 0:
        status = "leak"
        # Growth must go on in the last half, and in the last quarter: a step or a
        # cache that filled (a warm-up the detection missed) stops there, a leak does not.
        for part in (2, 4):
            if len(ux) // part < _LATE_MIN_POINTS:
                break
            h = len(ux) - len(ux) // part
            lx, ly = bin_medians(ux[h:], uy[h:], max_points)
            late, late_low, _, _ = theil_sen(lx, ly, confidence, autocorrelation=autocorrelation)
            # Levelled: no significant growth there, or growth at a small part of the
            # rate judged (a fill that slows down; a leak keeps its rate).
            if late_low <= threshold_per_step or late < _LATE_FRACTION * slope:
                status = "levelled"
                break
        if status == "leak":
            steps = _few_steps(rx, ry, confidence, autocorrelation, threshold_per_step,
                               min_growth)
        if status == "leak" and (growth < min_growth or steps or (
                rate is not None and rate < min_rate_per_hour)):
            status = "slight"
        elif status == "leak" and warmup == "auto" and n < 2 * min_points:
            status = "insufficient"  # too few points to tell this growth from a warm-up
    else:
        status = "ok"
    note = f"grew in {steps} steps" if status == "slight" and steps else ""
    if k and status in ("ok", "slight"):
        # What the warm-up absorbed: a growth that large then flat grew, then stopped
        # (a cache filled, a capped leak), however slight what follows it.
        m = min(5, k)
        rise = median(uy[:m]) - median(ys[:m])
        if rise > effect_sigmas * sigma and rise > min_growth and (
                status == "ok" or rise > 4 * growth):
            status = "levelled"
            grew = median(uy[:m]) - min(ys[:m])  # from where it started
            note = f"grew {fmt_value(grew, unit)}, then stopped"
    if axis_note:
        note = f"{note}; {axis_note}" if note else axis_note
    return Verdict(key, status, slope, low, high, rate, used, k, growth, sigma,
                   note=note, prefix=prefix, step=step, unit=unit, confidence=confidence)


# -- many metrics ----------------------------------------------------------------


def _prefix_of(samples: Sequence[Sample]) -> str:
    """From the key every Prober sample has, else ``memprobe`` if the keys start with it."""
    for s in samples[:3]:
        p = infer_prefix(s.values)
        if p is not None:
            return p
    for s in samples[:1]:
        if any(k.startswith(DEFAULT_PREFIX + "/") for k in s.values):
            return DEFAULT_PREFIX
    return ""


def count_floor(ys: Sequence[float], fraction: float) -> float:
    """The smallest growth of a count (objects, blocks) that is a leak: ``fraction``
    of its median. A few hundred of memprobe's own objects in a heap of a million
    are not the user's leak; a handful of descriptors out of fifty are."""
    return fraction * abs(median(ys)) if len(ys) else 0.0


def _threshold(key: str, short: str, thresholds: Mapping[str, float] | None,
               default: float) -> float:
    for k in (key, short) if thresholds else ():
        if k in thresholds:  # type: ignore[operator]
            return float(thresholds[k])  # type: ignore[index]
    return default


def analyze_samples(
    samples: Iterable[Sample],
    *,
    prefix: str | None = None,
    metrics: Sequence[str] | None = None,
    thresholds: Mapping[str, float] | None = None,
    threshold_per_step: float = 0.0,
    sites: bool = True,
    min_growth_bytes: float = 16384.0,
    min_growth_fraction: float = 0.005,
    min_rate_fraction_per_hour: float = 0.002,
    step: str = "sample",
    tiers: Tiers | None = None,
    confirm_counts: bool = True,
    collections: Sequence[_garbage.FullCollection] | None = None,
    **options: Any,
) -> Report:
    """Verdicts for every metric worth judging in ``samples`` (e.g. ``prober.history``).

    :param prefix: the prefix of the samples' keys (``memprobe/driver``); None
        finds it from the keys (:func:`memprobe.keys.infer_prefix`).
    :param metrics: metrics without prefix (``process/rss_bytes``) to judge;
        default :data:`DEFAULT_METRICS` (those present;
        ``tracemalloc/traced_bytes`` only if ``tracemalloc/filtered_bytes`` is absent).
    :param thresholds: tolerated growth per step by metric (full key or without
        prefix, also ``tracemalloc/top/<site>/size_bytes``); others get
        ``threshold_per_step``.
    :param sites: also judge each tracemalloc site and object type, and name
        the fastest-growing ones as culprits.
    :param min_growth_bytes: a ``_bytes`` metric that grows less than this over
        the window judged is "growing slightly", not a leak.
    :param min_growth_fraction: the same, as a fraction of the process's
        resident size (the median of ``process/rss_bytes``); the larger of the two
        applies. The default, 0.5%, is what a healthy process creeps by while its
        allocator arenas, caches, torch's allocator and Ray's buffers warm up (a
        few MiB in a 300-700 MiB RLlib process); the live alarm, ``prober.report()``,
        ``memprobe report`` and the RLlib adapter all judge with it, so they agree
        on the same data.
    :param min_rate_fraction_per_hour: a ``_bytes`` metric (with times) growing slower per hour
        than this fraction of the resident size is "growing slightly" (0.2%: 24 MiB a day of 500).
    :param step: what one sample stands for (``"sample"``, ``"call"``, ``"iteration"``).
    :param tiers: the whole-process metrics at every time scale (:class:`Tiers`) for a
        live alarm whose ``samples`` are the latest only; default: made from ``samples``.
        Each is judged at every scale (the latest points, coarser tiers, the whole run);
        its verdict is the one that tells most (a leak at any scale), with its scale.
    :param confirm_counts: a growth of ``gc/allocated_blocks`` is a leak only when the
        full collections recorded tell it from cyclic garbage awaiting one (else
        ``slight`` or ``ok``, with a note saying why: :mod:`memprobe.leak._garbage`).
        The live alarm, which collects once before it alarms, judges with False.
    :param collections: the full collections over the run (a report's, which judges the
        latest samples only); default: those in ``samples``.
    :param options: passed to :func:`analyze` (warmup, min_points, confidence...).
    """
    for name in options:
        if name not in LEAK_OPTIONS:
            raise ConfigError(name, f"unknown option of analyze_samples "
                              f"(options: {', '.join(sorted(LEAK_OPTIONS))})")
    for name, value in (("min_growth_bytes", min_growth_bytes),
                        ("min_growth_fraction", min_growth_fraction),
                        ("min_rate_fraction_per_hour", min_rate_fraction_per_hour)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ConfigError(name, f"must be a number >= 0, got {show(value)}")
    if not isinstance(samples, Sequence):
        samples = list(samples)
    if prefix is None:
        prefix = _prefix_of(samples)
    series, own, checks_kept = sample_series(samples, prefix, judged_keys(prefix, metrics, sites))
    # Windowed probes: what their windows saw, the evidence for the kind (traced bytes
    # are then no continuous series, and are not judged).
    windows = tuple(e for p in ("tracemalloc", "memray")
                    if (e := _windows.window_evidence(series, prefix, p)) is not None)
    traced_keys = {key_of(prefix, m) for m in (_kinds.FILTERED, _kinds.TRACED)}
    if any(e.probe == "tracemalloc" for e in windows) or not traced_keys & set(series):
        # What the alarm's capture traced: the evidence where the cheap probes alone ran,
        # and the longer view beside short windows.
        captured = _windows.capture_evidence(samples, prefix)
        if captured is not None:
            windows = (*windows, captured)
    windowed = any(e.probe == "tracemalloc" for e in windows)
    if windowed:
        series.pop(key_of(prefix, _kinds.TRACED), None)
    shorts = {k: short_key(k, prefix) for k in series}
    wanted = tuple(metrics) if metrics is not None else DEFAULT_METRICS
    # Traced bytes read in windows are no continuous series: not judged, from the
    # samples or from the given tiers (a Prober's, which keep them at every scale).
    if windowed or (metrics is None and _kinds.FILTERED in shorts.values()):
        wanted = tuple(m for m in wanted if m != _kinds.TRACED)
    # The metrics the given tiers lack (a Prober without an alarm keeps the resident
    # sizes only) are judged at the scales of the samples given.
    given = tiers.series if tiers is not None else {}
    own_tiers = Tiers()
    own_tiers.add({k: c for k, c in series.items() if shorts[k] in wanted and k not in given})
    tiered = {**given, **own_tiers.series}
    whole = {k: short_key(k, prefix) for k in tiered}
    rss_level = floor_level(tiered.get(make_key(prefix, "process", "rss_bytes")))
    floor = max(min_growth_bytes, min_growth_fraction * rss_level)
    min_points = options.get("min_points", 20)
    # The resident size less memprobe's own memory is only as exact as that estimate:
    # the allocator's overhead on memprobe's own blocks (pymalloc pools, fragmentation)
    # is not in it. A resident growth within what memprobe's own memory grew by over
    # the last three quarters of the run is below what the check can resolve.
    # What the leak checks kept is measured across each check, but the allocator may
    # give a check's pages back, or take more, a little later: within that much too.
    resident_floor = max(floor, own[-1] - own[len(own) // 4] + checks_kept) if own else floor
    resident = {make_key(prefix, "process", m) for m in _kinds.RESIDENT}
    verdicts: dict[str, Verdict] = {}
    site_v: list[Verdict] = []
    type_v: list[Verdict] = []
    rate_floor = min_rate_fraction_per_hour * rss_level

    declared = installed_declarations()

    def judge(key: str, xs: Sequence[float], ys: Sequence[float], ts: Sequence[float],
              th: float) -> Verdict:
        unit = describe_key(key, prefix, declared).unit
        in_bytes = unit == "bytes"
        return analyze(xs, ys, key=key, times=ts, threshold_per_step=th, prefix=prefix,
                       step=step, min_growth=(resident_floor if key in resident else
                                              floor if in_bytes else
                                              count_floor(ys, min_growth_fraction)),
                       min_rate_per_hour=rate_floor if in_bytes else 0.0, unit=unit,
                       **options)

    for key, short in whole.items():
        if short in wanted:
            th = _threshold(key, short, thresholds, threshold_per_step)
            verdicts[key] = judge_scales(
                tiered[key], min_points,
                lambda xs, ys, ts, k=key, th=th: judge(k, xs, ys, ts, th),
                (key, th, floor, resident_floor, rate_floor, step, prefix, repr(options)))
    young: list[tuple[float, str]] = []  # (grown, site): too few points for a verdict
    for key, (xs, ys, ts) in series.items() if sites else ():
        group = {"tracemalloc": site_v, "objects": type_v}.get(site_probe(key, prefix) or "")
        if group is not None:
            group.append(judge(key, xs, ys, ts, _threshold(key, shorts[key], thresholds, 0.0)))
            if group is site_v and group[-1].status == "insufficient" and len(ys) > 2 \
                    and group[-1].site != OTHER:
                young.append((ys[-1] - ys[0], group[-1].site or ""))

    def rank(vs: list[Verdict]) -> tuple[Verdict, ...]:  # leaking and fastest first
        return tuple(sorted(vs, key=lambda v: (not v.leaking, -v.slope_per_step, v.key)))

    sites_r, types_r = rank(site_v), rank(type_v)
    site_names = tuple(v.site or "" for v in sites_r if v.leaking)
    type_names = tuple(v.site or "" for v in types_r if v.leaking)
    holders = tuple(v.site or "" for v in sites_r if v.status in ("leak", "slight")) or tuple(
        # Sites that appeared too late for a verdict of their own (after an import, in
        # a short run), by how much they grew: they still name a leak of Python's bytes.
        site for grown, site in sorted(young, reverse=True)[:5] if grown > 0)
    forecast, rss_v = (series.get(key_of(prefix, FORECAST)),
                       verdicts.get(make_key(prefix, "process", "rss_bytes")))
    if forecast and forecast[1][-1] >= 0 and rss_v and rss_v.status in ("leak", "slight"):
        verdicts[rss_v.key] = dataclasses.replace(rss_v, hours_to_oom=forecast[1][-1])
    blocks_key = key_of(prefix, _kinds.BLOCKS)
    if confirm_counts and blocks_key in verdicts:  # before the kinds, which read it
        xs, _, ys = tiered[blocks_key].raw.points()
        if collections is None:
            collections = _garbage.full_collections(samples, prefix)
        verdicts[blocks_key] = _garbage.weigh(verdicts[blocks_key], collections, xs[-1],
                                              count_floor(ys, min_growth_fraction))
    by_metric = {v.metric: v for v in verdicts.values()}
    for k, v in list(verdicts.items()):
        if v.leaking:
            kind, culprits, note = _kinds.classify(v.metric, by_metric, site_names, type_names,
                                                   windows, holders)
            verdicts[k] = dataclasses.replace(
                v, kind=kind, culprits=culprits,
                note=f"{note}; {v.note}" if v.note and note else note or v.note)
    return Report(verdicts, sites_r, types_r, prefix)
