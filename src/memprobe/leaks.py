"""Leak diagnosis: turn a metric's history into a verdict that names the culprit.

>>> xs = list(range(100))
>>> v = analyze(xs, [1000 + 64 * x for x in xs], key="rss_bytes")
>>> v.status, v.slope_per_step
('leak', 64.0)
>>> analyze(xs, [1000 + (x % 7) for x in xs]).status
'ok'

The estimator is Theil-Sen (the median of all pairwise slopes) with Sen's
distribution-free confidence interval from Kendall's S statistic. It is pure
Python (no numpy or scipy in the core). Series longer than
``max_points`` are first reduced to ``max_points`` bin medians, which keeps
one call under a few milliseconds for any history length. See docs/leaks.md
for why Theil-Sen and not least squares, and for the accuracy measured.

A series is a **leak** when, after its warm-up:

1. it has at least ``min_points`` points;
2. the lower bound of the slope's confidence interval is above
   ``threshold_per_step`` (growth is significant *and* faster than the threshold);
3. the fitted growth over the window is larger than ``effect_sigmas`` times the
   robust noise (1.4826 x MAD of the residuals), so a slope that is
   "significant" only because the noise is autocorrelated (a gc sawtooth, an
   allocator's steps) is not reported.
"""

from __future__ import annotations

import gc
import math
import os
import struct
import time
import tracemalloc
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Literal

from ._errors import ConfigError, LeakError, show

if TYPE_CHECKING:
    from ._prober import Sample

__all__ = [
    "DEFAULT_METRICS",
    "LeakError",
    "Report",
    "Verdict",
    "analyze",
    "analyze_samples",
    "assert_no_leak",
    "check_leaks",
    "theil_sen",
]

Status = Literal["leak", "ok", "insufficient"]

#: Metrics judged by :func:`analyze_samples` (after the ``<prefix>/``), besides
#: the per-site and per-type series. ``tracemalloc/traced_bytes`` is judged only
#: when ``tracemalloc/filtered_bytes`` is absent (files written before it existed):
#: traced bytes include memprobe's own history, which grows by design.
DEFAULT_METRICS = (
    "process/rss_bytes",
    "process/vms_bytes",
    "process/uss_bytes",
    "process/pss_bytes",
    "process/num_fds",
    "process/num_threads",
    "tracemalloc/filtered_bytes",
    "tracemalloc/traced_bytes",
    "objects/total_count",
    "gc/garbage_count",
)

_SITE_METRIC = ("tracemalloc/top/", "/size_bytes")
_FILTERED = "tracemalloc/filtered_bytes"
#: The last-half check of :func:`analyze` needs at least this many points.
_LATE_MIN_POINTS = 10
_TRACED = "tracemalloc/traced_bytes"
_TYPE_METRIC = ("objects/top/", "/count")
#: One double: the cells of check_leaks' columns.
_DOUBLE = struct.Struct("d")


@dataclass(frozen=True)
class Verdict:
    """The verdict on one metric's series.

    :ivar key: the metric (e.g. ``memprobe/process/rss_bytes``).
    :ivar status: ``"leak"``, ``"ok"`` or ``"insufficient"`` (not enough points).
    :ivar slope_per_step: Theil-Sen growth per step (x unit), after warm-up.
    :ivar slope_low: lower bound of the slope's confidence interval.
    :ivar slope_high: upper bound.
    :ivar rate_per_hour: growth per hour of wall time, when timestamps were given.
    :ivar n_points: points used (after warm-up).
    :ivar warmup_points: points dropped as warm-up.
    :ivar growth: fitted growth over the window used, ``slope * x-span``.
    :ivar noise: robust noise of the residuals (1.4826 x MAD).
    :ivar culprits: names of the most likely causes, most likely first
        (``file.py:line`` sites or type names), filled by :func:`analyze_samples`.
    :ivar note: a human hint, e.g. "native memory: rss grew but tracemalloc did not".
    """

    key: str
    status: Status
    slope_per_step: float
    slope_low: float
    slope_high: float
    rate_per_hour: float | None
    n_points: int
    warmup_points: int
    growth: float = 0.0
    noise: float = 0.0
    culprits: tuple[str, ...] = ()
    note: str = ""

    @property
    def leak(self) -> bool:
        """True when the status is ``"leak"``."""
        return self.status == "leak"

    @property
    def culprit(self) -> str | None:
        """The most likely cause, or None."""
        return self.culprits[0] if self.culprits else None

    def describe(self) -> str:
        """One line: key, status, rate, culprit."""
        s = f"{self.key}: {self.status}"
        if self.status != "insufficient":
            s += (
                f", {self.slope_per_step:+.4g}/step [{self.slope_low:+.4g}, {self.slope_high:+.4g}]"
            )
            if self.rate_per_hour is not None:
                s += f", {self.rate_per_hour:+.4g}/hour"
        s += f" over {self.n_points} points (warm-up {self.warmup_points})"
        if self.culprits:
            s += "; suspects: " + ", ".join(self.culprits[:5])
        if self.note:
            s += f"; {self.note}"
        return s


@dataclass(frozen=True)
class Report:
    """Verdicts on every metric worth judging, and the ranked suspects.

    :ivar verdicts: ``{key: Verdict}`` for the whole-process metrics
        (rss, vms, num_fds, traced bytes, object count...).
    :ivar sites: verdicts on tracemalloc sites, fastest-growing first.
    :ivar types: verdicts on object types, fastest-growing first.
    """

    verdicts: dict[str, Verdict] = field(default_factory=dict)
    sites: tuple[Verdict, ...] = ()
    types: tuple[Verdict, ...] = ()

    @property
    def leaks(self) -> list[Verdict]:
        """The leaking whole-process metrics."""
        return [v for v in self.verdicts.values() if v.leak]

    @property
    def leak(self) -> bool:
        """True when any whole-process metric leaks."""
        return any(v.leak for v in self.verdicts.values())

    @property
    def grew(self) -> list[str]:
        """Short names of the metrics that leak, e.g. ``["process/num_fds"]``."""
        return [_short(v.key) for v in self.leaks]

    @property
    def suspects(self) -> list[str]:
        """Leaking sites then leaking types, fastest first."""
        return [_name(v.key) for v in (*self.sites, *self.types) if v.leak]

    def get(self, metric: str) -> Verdict | None:
        """The verdict on ``metric``, given by full key or short name (``process/rss_bytes``)."""
        if metric in self.verdicts:
            return self.verdicts[metric]
        for k, v in self.verdicts.items():
            if _short(k) == metric:
                return v
        return None

    def __str__(self) -> str:
        lines = [v.describe() for v in self.verdicts.values()]
        for title, group in (("sites", self.sites), ("types", self.types)):
            leaking = [v for v in group if v.leak]
            if leaking:
                lines.append(f"growing {title}:")
                lines += [f"  {_name(v.key)}: {v.slope_per_step:+.4g}/step" for v in leaking[:10]]
        return "\n".join(lines) if lines else "no metrics to judge"


def _short(key: str) -> str:
    """``memprobe/process/rss_bytes`` -> ``process/rss_bytes``."""
    _head, sep, rest = key.partition("/")
    return rest if sep else key


def _name(key: str) -> str:
    """The site or type inside ``.../top/<name>/size_bytes``."""
    short = _short(key)
    for pre, suf in (_SITE_METRIC, _TYPE_METRIC):
        if short.startswith(pre) and short.endswith(suf):
            return short[len(pre) : -len(suf)]
    return short


# -- the estimator -------------------------------------------------------------


def _median(v: list[float]) -> float:
    s = sorted(v)
    n = len(s)
    m = n // 2
    return s[m] if n % 2 else (s[m - 1] + s[m]) / 2.0


def _reduce(
    xs: Sequence[float], ys: Sequence[float], max_points: int
) -> tuple[list[float], list[float]]:
    """At most ``max_points`` points: medians of consecutive equal-size bins."""
    n = len(xs)
    if n <= max_points:
        return list(xs), list(ys)
    bx: list[float] = []
    by: list[float] = []
    for b in range(max_points):
        lo = b * n // max_points
        hi = (b + 1) * n // max_points
        bx.append(_median(list(xs[lo:hi])))
        by.append(_median(list(ys[lo:hi])))
    return bx, by


def _rank(v: Sequence[float]) -> list[float]:
    """Ranks from 1, ties given their average rank."""
    order = sorted(range(len(v)), key=v.__getitem__)
    ranks = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        r = (i + j) / 2.0 + 1.0
        for k in range(i, j + 1):
            ranks[order[k]] = r
        i = j + 1
    return ranks


def autocorrelation_factor(
    xs: Sequence[float], ys: Sequence[float], slope: float, confidence: float = 0.95
) -> float:
    """Hamed and Rao's (1998) variance correction ``n / n*`` for serially correlated noise.

    The residuals ``y - slope * x`` are ranked; every lag whose rank
    autocorrelation is significant (outside ``+-z / sqrt(n)``) widens the
    variance of Kendall's S by ``1 + 2 / (n (n-1) (n-2)) * sum((n-k)(n-k-1)(n-k-2) rho_k)``.
    Memory noise is rarely independent (an allocator holds a chunk for a while,
    garbage ramps until a collection): without the correction a step or a
    sawtooth reads as a "significant" slope. Never below 1.

    >>> autocorrelation_factor(range(6), [0, 1, 0, 1, 0, 1], 0.0) >= 1.0
    True
    """
    n = len(xs)
    if n < 4:
        return 1.0
    r = _rank([y - slope * x for x, y in zip(xs, ys)])
    mean = (n + 1) / 2.0
    d = [v - mean for v in r]
    den = sum(v * v for v in d)
    if den <= 0:
        return 1.0
    bound = NormalDist().inv_cdf(0.5 + confidence / 2.0) / math.sqrt(n)
    acc = 0.0
    for k in range(1, n - 2):
        rho = sum(d[i] * d[i + k] for i in range(n - k)) / den
        if abs(rho) > bound:
            acc += (n - k) * (n - k - 1) * (n - k - 2) * rho
    return max(1.0, 1.0 + 2.0 / (n * (n - 1) * (n - 2)) * acc)


def _sorted_slopes(xs: Sequence[float], ys: Sequence[float]) -> list[float]:
    n = len(xs)
    slopes: list[float] = []
    append = slopes.append
    for i in range(n - 1):
        xi = xs[i]
        yi = ys[i]
        for j in range(i + 1, n):
            dx = xs[j] - xi
            if dx:
                append((ys[j] - yi) / dx)
    slopes.sort()
    return slopes


def _sen_interval(
    slopes: list[float], ys: Sequence[float], confidence: float, factor: float
) -> tuple[float, float]:
    # Kendall's S variance, corrected for ties in y, times the autocorrelation factor.
    n = len(ys)
    m = len(slopes)
    counts: dict[float, int] = {}
    for y in ys:
        counts[y] = counts.get(y, 0) + 1
    s_var = n * (n - 1) * (2 * n + 5)
    for t in counts.values():
        if t > 1:
            s_var -= t * (t - 1) * (2 * t + 5)
    var = s_var / 18.0 * factor
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    c = z * math.sqrt(max(var, 0.0))
    lo_i = math.floor((m - c) / 2.0)
    hi_i = math.ceil((m + c) / 2.0)
    return slopes[min(max(lo_i, 0), m - 1)], slopes[min(max(hi_i, 0), m - 1)]


def theil_sen(
    xs: Sequence[float],
    ys: Sequence[float],
    confidence: float = 0.95,
    *,
    autocorrelation: bool = False,
) -> tuple[float, float, float, float]:
    """Theil-Sen slope with Sen's confidence interval.

    :param autocorrelation: widen the interval by :func:`autocorrelation_factor`
        (Hamed-Rao), for noise that is not independent from step to step.
    :returns: ``(slope, low, high, intercept)``; the intercept is
        ``median(y - slope * x)``. Pairs with equal x are skipped. The interval
        uses Kendall's S variance with the tie correction for y.

    >>> theil_sen([0, 1, 2, 3], [1, 3, 5, 7])[:2]
    (2.0, 2.0)
    """
    n = len(xs)
    slopes = _sorted_slopes(xs, ys)
    if not slopes:
        return 0.0, 0.0, 0.0, _median(list(ys)) if n else 0.0
    m = len(slopes)
    half = m // 2
    slope = slopes[half] if m % 2 else (slopes[half - 1] + slopes[half]) / 2.0
    factor = autocorrelation_factor(xs, ys, slope, confidence) if autocorrelation else 1.0
    low, high = _sen_interval(slopes, ys, confidence, factor)
    intercept = _median([y - slope * x for x, y in zip(xs, ys)])
    return slope, low, high, intercept


def _noise(xs: Sequence[float], ys: Sequence[float], slope: float, intercept: float) -> float:
    res = [y - slope * x - intercept for x, y in zip(xs, ys)]
    med = _median(res)
    return 1.4826 * _median([abs(r - med) for r in res])


def auto_warmup(xs: Sequence[float], ys: Sequence[float], min_points: int = 20) -> int:
    """Points to drop as warm-up: where early growth gives way to the series' late trend.

    Compares the slope of a sliding window (a quarter of the series) with the
    slope of the last half; the warm-up ends at the first window whose slope is
    within noise of the late slope. At most half the series is dropped, and
    nothing when the series is too short to tell.
    """
    n = len(xs)
    if n < 2 * min_points:
        return 0
    rx, ry = _reduce(xs[n // 2 :], ys[n // 2 :], 40)
    late, _, _, icpt = theil_sen(rx, ry)
    sigma = _noise(rx, ry, late, icpt)
    w = max(n // 4, 4)
    stride = max(n // 20, 1)
    for k in range(0, n // 2 + 1, stride):
        wx, wy = _reduce(xs[k : k + w], ys[k : k + w], 24)
        s, _, _, _ = theil_sen(wx, wy)
        span = (wx[-1] - wx[0]) or 1.0
        # The window's slope may exceed the late one by noise: ~3 SE of a slope
        # over this window, with the late noise, plus a quarter of the late slope.
        tol = 3.0 * sigma * math.sqrt(12.0 / len(wx)) / span + 0.25 * abs(late)
        if s <= late + tol:
            return k
    return n // 2


def _check_series(key: str, xs: Sequence[float], ys: Sequence[float]) -> None:
    if len(xs) != len(ys):
        raise ConfigError("xs/ys", f"{key or 'series'}: {len(xs)} x values but {len(ys)} y values")
    for v in (*xs, *ys):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError("xs/ys", f"{key or 'series'}: not a finite number: {v!r}")


def analyze(
    xs: Sequence[float],
    ys: Sequence[float],
    *,
    key: str = "",
    times: Sequence[float] | None = None,
    warmup: str | int | None = "auto",
    min_points: int = 20,
    threshold_per_step: float = 0.0,
    confidence: float = 0.95,
    effect_sigmas: float = 2.0,
    max_points: int = 80,
    autocorrelation: bool = True,
) -> Verdict:
    """Decide whether the series ``ys`` over ``xs`` (steps) grows.

    :param key: the metric's name, copied into the verdict.
    :param times: unix seconds of each point, for ``rate_per_hour``.
    :param warmup: points to drop first: an int, ``None`` (none) or
        ``"auto"`` (the plateau after initial growth, see :func:`auto_warmup`).
    :param min_points: fewer points than this (after warm-up) is "insufficient".
    :param threshold_per_step: growth per step that is tolerated; a leak is
        growth whose confidence interval lies above it.
    :param confidence: of the slope's interval (two-sided).
    :param effect_sigmas: the fitted growth over the window must exceed this
        many times the residual noise.
    :param max_points: longer series are reduced to this many bin medians first.
    :param autocorrelation: widen the slope's interval for serially correlated
        noise (Hamed-Rao, see :func:`autocorrelation_factor`).
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
    n = len(xs)
    if warmup == "auto":
        k = auto_warmup(xs, ys, min_points)
    elif warmup is None:
        k = 0
    elif isinstance(warmup, int) and not isinstance(warmup, bool) and warmup >= 0:
        k = min(warmup, n)
    else:
        raise ConfigError("warmup", f"must be None, 'auto' or an int >= 0, got {show(warmup)}")
    ux, uy = xs[k:], ys[k:]
    used = n - k
    if used < min_points:
        return Verdict(key, "insufficient", 0.0, 0.0, 0.0, None, used, k)
    rx, ry = _reduce(ux, uy, max_points)
    slope, low, high, icpt = theil_sen(rx, ry, confidence, autocorrelation=autocorrelation)
    sigma = _noise(rx, ry, slope, icpt)
    growth = slope * (ux[-1] - ux[0])
    rate = None
    if times is not None:
        dt = times[-1] - times[k]
        if dt > 0:
            rate = slope * (ux[-1] - ux[0]) / dt * 3600.0
    leak = low > threshold_per_step and growth > effect_sigmas * sigma and slope > 0
    if leak and len(ux) // 2 >= _LATE_MIN_POINTS:
        # Growth must go on in the last half too: a step or a cache that filled
        # early (a warm-up the auto detection missed) stops there, a leak does not.
        h = len(ux) // 2
        lx, ly = _reduce(ux[h:], uy[h:], max_points)
        _, late_low, _, _ = theil_sen(lx, ly, confidence, autocorrelation=autocorrelation)
        leak = late_low > threshold_per_step
    return Verdict(key, "leak" if leak else "ok", slope, low, high, rate, used, k, growth, sigma)


# -- many metrics ----------------------------------------------------------------


def _series(samples: Sequence[Sample]) -> dict[str, tuple[list[float], list[float], list[float]]]:
    out: dict[str, tuple[list[float], list[float], list[float]]] = {}
    for i, s in enumerate(samples):
        x = float(s.step if s.step is not None else i)
        for k, v in s.values.items():
            t = out.get(k)
            if t is None:
                t = out[k] = ([], [], [])
            t[0].append(x)
            t[1].append(float(v))
            t[2].append(s.time_seconds)
    return out


def _threshold(key: str, thresholds: Mapping[str, float] | None, default: float) -> float:
    if thresholds:
        if key in thresholds:
            return float(thresholds[key])
        short = _short(key)
        if short in thresholds:
            return float(thresholds[short])
    return default


def analyze_samples(
    samples: Iterable[Sample],
    *,
    metrics: Sequence[str] | None = None,
    thresholds: Mapping[str, float] | None = None,
    threshold_per_step: float = 0.0,
    sites: bool = True,
    **options: Any,
) -> Report:
    """Verdicts for every metric worth judging in ``samples`` (e.g. ``prober.history``).

    :param metrics: short names (``process/rss_bytes``) of the whole-process
        metrics to judge; default :data:`DEFAULT_METRICS` (those present;
        ``tracemalloc/traced_bytes`` only if ``tracemalloc/filtered_bytes`` is absent).
    :param thresholds: tolerated growth per step by metric (full key or short
        name, also ``tracemalloc/top/<site>/size_bytes``); others get
        ``threshold_per_step``.
    :param sites: also judge each tracemalloc site and object type, and name
        the fastest-growing ones as culprits.
    :param options: passed to :func:`analyze` (warmup, min_points, confidence...).
    """
    samples = list(samples)
    series = _series(samples)
    wanted = tuple(metrics) if metrics is not None else DEFAULT_METRICS
    if metrics is None and any(_short(k) == _FILTERED for k in series):
        wanted = tuple(m for m in wanted if m != _TRACED)
    verdicts: dict[str, Verdict] = {}
    site_v: list[Verdict] = []
    type_v: list[Verdict] = []
    for key, (xs, ys, ts) in series.items():
        short = _short(key)
        kind = None
        if sites and short.startswith(_SITE_METRIC[0]) and short.endswith(_SITE_METRIC[1]):
            kind = site_v
        elif sites and short.startswith(_TYPE_METRIC[0]) and short.endswith(_TYPE_METRIC[1]):
            kind = type_v
        elif short not in wanted:
            continue
        th = _threshold(key, thresholds, threshold_per_step if kind is None else 0.0)
        v = analyze(xs, ys, key=key, times=ts, threshold_per_step=th, **options)
        if kind is None:
            verdicts[key] = v
        else:
            kind.append(v)

    def rank(vs: list[Verdict]) -> tuple[Verdict, ...]:
        return tuple(sorted(vs, key=lambda v: (not v.leak, -v.slope_per_step, v.key)))

    sites_r, types_r = rank(site_v), rank(type_v)
    leaking_sites = tuple(_name(v.key) for v in sites_r if v.leak)
    leaking_types = tuple(_name(v.key) for v in types_r if v.leak)
    # Python-side memory: filtered bytes (memprobe's own allocations left out) if
    # judged, else traced bytes.
    by_short = {_short(k): v for k, v in verdicts.items()}
    traced = by_short.get(_FILTERED, by_short.get(_TRACED))
    for k, v in list(verdicts.items()):
        short = _short(k)
        culprits: tuple[str, ...] = ()
        note = ""
        if short in (_FILTERED, _TRACED):
            culprits = leaking_sites
        elif short == "objects/total_count":
            culprits = leaking_types
        elif short == "process/num_fds" and v.leak:
            note = "file descriptors: files, sockets or pipes opened and never closed"
        elif short in ("process/rss_bytes", "process/uss_bytes", "process/pss_bytes") and v.leak:
            # Python allocations explain rss growth only if traced bytes grow at
            # a comparable rate; otherwise the memory is native (C extensions, malloc).
            if (
                traced is not None
                and traced.leak
                and traced.slope_per_step >= 0.1 * v.slope_per_step
            ):
                culprits = leaking_sites
                note = "Python allocations (tracemalloc grew too)"
            elif traced is not None:
                note = (
                    "native memory: rss grew but tracemalloc's traced bytes did not "
                    f"({_short(traced.key)} {traced.slope_per_step:+.4g}/step)"
                )
            else:
                culprits = leaking_types
        if culprits or note:
            verdicts[k] = _replace(v, culprits=culprits, note=note)
    return Report(verdicts, sites_r, types_r)


def _replace(v: Verdict, **changes: Any) -> Verdict:
    import dataclasses

    return dataclasses.replace(v, **changes)


# -- repeated calls ------------------------------------------------------------------


def check_leaks(
    fn: Callable[[], Any],
    *,
    repeats: int = 50,
    warmup: str | int | None = 5,
    probes: Sequence[str] | Mapping[str, Mapping[str, Any] | None] | None = None,
    tracemalloc_top: int | None = 20,
    collect: bool = True,
    thresholds: Mapping[str, float] | None = None,
    **options: Any,
) -> Report:
    """Call ``fn()`` ``repeats`` times, sampling after each call, and judge the series.

    :param warmup: calls whose samples are dropped (an int), ``"auto"`` or None.
    :param probes: Prober probes sampled after each call (default: process);
        add ``"objects"`` to rank types too.
    :param tracemalloc_top: trace allocations and judge the ``N`` largest sites
        (None: do not trace). ``tracemalloc/filtered_bytes``, the bytes traced
        *outside memprobe's own files*, is judged, so the samples this function
        keeps do not look like a leak (``tracemalloc/traced_bytes`` is recorded
        but not judged).
    :param collect: ``gc.collect()`` before each sample, so garbage in cycles
        does not look like growth.
    :param thresholds: tolerated growth per call, by metric (see :func:`analyze_samples`).
    """
    from ._prober import Prober, Sample
    from ._sitestats import default_filters, site_stats
    from .probes.tracemalloc import acquire_tracing, release_tracing

    if not callable(fn):
        raise ConfigError("fn", f"must be callable, got {show(fn)}")
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 3:
        raise ConfigError("repeats", f"must be an int >= 3, got {show(repeats)}")
    if tracemalloc_top is not None and (
        not isinstance(tracemalloc_top, int) or tracemalloc_top < 1
    ):
        raise ConfigError(
            "tracemalloc_top", f"must be None or an int >= 1, got {show(tracemalloc_top)}"
        )
    if probes is None:
        probes = ["process"]
    opts = dict(options)
    dropped = warmup if isinstance(warmup, int) else 0
    opts.setdefault("min_points", min(20, max(3, repeats - dropped)))
    prober = Prober(probes, history=1, load_entrypoints=False)
    filters = default_filters()
    # The series go into columns allocated once per key, not into new objects per
    # call: what this loop keeps must not grow with the calls, or it would show as
    # growth itself (more traced blocks, a larger copy of the traces each sample,
    # rss ratcheting up; more live objects). A column is a bytearray of doubles,
    # which the gc does not track: keys keep appearing during the run (the objects
    # probe's growth/<type> keys), and an array.array per new key was counted by
    # the objects probe as growth of its own (about one object per call in RLlib).
    nan = float("nan")
    times = array("d", [nan]) * repeats
    empty_column = _DOUBLE.pack(nan) * repeats
    columns: dict[str, bytearray] = {}
    site_keys: dict[str, str] = {}
    pack_into = _DOUBLE.pack_into

    def put(key: str, i: int, v: float) -> None:
        col = columns.get(key)
        if col is None:
            col = columns[key] = bytearray(empty_column)
        pack_into(col, i * 8, v)

    if tracemalloc_top is not None:
        acquire_tracing(1)
    try:
        with prober:
            if collect:
                gc.collect()
            for i in range(repeats):
                fn()
                if collect:
                    gc.collect()
                for k, v in prober.sample(step=i, force=True).items():
                    put(k, i, v)
                if tracemalloc_top is not None:
                    stats = site_stats("lineno", filters)
                    put("memprobe/tracemalloc/traced_bytes", i, tracemalloc.get_traced_memory()[0])
                    put("memprobe/tracemalloc/filtered_bytes", i,
                        sum(sz for sz, _ in stats.values()))
                    ranked = sorted(stats.items(), key=lambda kv: -kv[1][0])[:tracemalloc_top]
                    for site, (sz, _) in ranked:
                        key = site_keys.get(site)
                        if key is None:
                            key = site_keys[site] = f"memprobe/tracemalloc/top/{site}/size_bytes"
                        put(key, i, sz)
                    del stats, ranked
                times[i] = time.time()
    finally:
        if tracemalloc_top is not None:
            release_tracing()
    pid = os.getpid()
    series = {k: memoryview(c).cast("d").tolist() for k, c in columns.items()}
    samples = [
        Sample(times[i], i, pid, {k: c[i] for k, c in series.items() if c[i] == c[i]})
        for i in range(repeats)
    ]
    return analyze_samples(samples, thresholds=thresholds, warmup=warmup, **opts)


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
    metrics: Sequence[str] = (_FILTERED, "process/rss_bytes"),
    probes: Sequence[str] | Mapping[str, Mapping[str, Any] | None] | None = None,
    **options: Any,
) -> Report:
    """Call ``fn()`` repeatedly and raise :class:`LeakError` if memory keeps growing.

    A metric fails when it leaks faster than ``max_growth_bytes`` spread over
    the calls after warm-up (so the total growth the test tolerates is about
    ``max_growth_bytes``). Counts (``process/num_fds``, ``objects/total_count``)
    listed in ``metrics`` tolerate no growth.

    :returns: the :class:`Report` when nothing leaks.
    :raises LeakError: naming the metrics that grew and the suspect sites.
    """
    check_growth_bytes(max_growth_bytes)
    if probes is None:
        probes = {"process": {}}
        if "objects/total_count" in metrics:
            probes["objects"] = {"top": 20}
    n_used = max(1, repeats - (warmup if isinstance(warmup, int) else 0))
    per_call = max_growth_bytes / n_used
    thresholds = {m: (per_call if m.endswith("_bytes") else 0.0) for m in metrics}
    report = check_leaks(
        fn, repeats=repeats, warmup=warmup, probes=probes, thresholds=thresholds, **options
    )
    failing = [v for m in metrics if (v := report.get(m)) is not None and v.leak]
    if failing:
        raise LeakError(_leak_message(failing, report, repeats, max_growth_bytes), report)
    return report


def _leak_message(failing: list[Verdict], report: Report, repeats: int, max_growth: float) -> str:
    lines = [f"memory keeps growing over {repeats} calls (tolerated: {max_growth:g} bytes):"]
    for v in failing:
        lines.append(
            f"  {_short(v.key)}: {v.slope_per_step:+.1f}/call, "
            f"+{v.growth:.0f} over {v.n_points} calls" + (f" ({v.note})" if v.note else "")
        )
    sus = [v for v in (*report.sites, *report.types) if v.leak][:10]
    if sus:
        lines.append("suspects (fastest-growing first):")
        lines += [f"  {_name(v.key)}: {v.slope_per_step:+.1f}/call" for v in sus]
    return "\n".join(lines)
