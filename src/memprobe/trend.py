"""Trend statistics: pure functions on a series ``ys`` over ``xs``.

The estimator is Theil-Sen (the median of all pairwise slopes) with Sen's
distribution-free confidence interval from Kendall's S statistic, widened for
serially correlated noise (Hamed and Rao), and a warm-up detector. Pure
Python: no numpy or scipy in the core. See docs/leaks.md for why Theil-Sen and
not least squares. :mod:`memprobe.leak._verdicts` turns these into verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

__all__ = [
    "auto_warmup",
    "autocorrelation_factor",
    "bin_medians",
    "median",
    "robust_noise",
    "theil_sen",
]


def median(v: Sequence[float]) -> float:
    """The median of a non-empty sequence."""
    s = sorted(v)
    n = len(s)
    m = n // 2
    return s[m] if n % 2 else (s[m - 1] + s[m]) / 2.0


def bin_medians(
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
        bx.append(median(list(xs[lo:hi])))
        by.append(median(list(ys[lo:hi])))
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

    ```pycon
    >>> autocorrelation_factor(range(6), [0, 1, 0, 1, 0, 1], 0.0) >= 1.0
    True

    ```
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
    # Sen's ranks (N - C) / 2 and (N + C) / 2 + 1 (from 1), taken symmetric about
    # the median so that negating the series mirrors the interval exactly.
    lo_i = min(max(math.floor((m - 1 - c) / 2.0), 0), m - 1)
    return slopes[lo_i], slopes[m - 1 - lo_i]


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

    ```pycon
    >>> theil_sen([0, 1, 2, 3], [1, 3, 5, 7])[:2]
    (2.0, 2.0)

    ```
    """
    n = len(xs)
    slopes = _sorted_slopes(xs, ys)
    if not slopes:
        return 0.0, 0.0, 0.0, median(list(ys)) if n else 0.0
    m = len(slopes)
    half = m // 2
    slope = slopes[half] if m % 2 else (slopes[half - 1] + slopes[half]) / 2.0
    factor = autocorrelation_factor(xs, ys, slope, confidence) if autocorrelation else 1.0
    low, high = _sen_interval(slopes, ys, confidence, factor)
    intercept = median([y - slope * x for x, y in zip(xs, ys)])
    return slope, low, high, intercept


def robust_noise(
    xs: Sequence[float], ys: Sequence[float], slope: float, intercept: float
) -> float:
    """1.4826 x the median absolute deviation of the residuals ``y - slope * x - intercept``:
    the standard deviation for Gaussian noise, and one that outliers do not move."""
    res = [y - slope * x - intercept for x, y in zip(xs, ys)]
    med = median(res)
    return 1.4826 * median([abs(r - med) for r in res])


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
    rx, ry = bin_medians(xs[n // 2 :], ys[n // 2 :], 40)
    late, _, _, icpt = theil_sen(rx, ry)
    sigma = robust_noise(rx, ry, late, icpt)
    w = max(n // 4, 4)
    stride = max(n // 20, 1)
    for k in range(0, n // 2 + 1, stride):
        wx, wy = bin_medians(xs[k : k + w], ys[k : k + w], 24)
        s, _, _, _ = theil_sen(wx, wy)
        span = (wx[-1] - wx[0]) or 1.0
        # The window's slope may exceed the late one by noise: ~3 SE of a slope
        # over this window, with the late noise, plus a quarter of the late slope.
        tol = 3.0 * sigma * math.sqrt(12.0 / len(wx)) / span + 0.25 * abs(late)
        if s <= late + tol:
            return k
    return n // 2
