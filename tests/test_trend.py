"""The trend statistics: exact cases and the laws Theil-Sen and its interval obey."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memprobe.trend import (
    auto_warmup,
    autocorrelation_factor,
    bin_medians,
    median,
    robust_noise,
    theil_sen,
)

ints = st.integers(min_value=-10_000, max_value=10_000)
series = st.lists(st.integers(-100_000, 100_000), min_size=3, max_size=40)


@given(a=ints, b=ints, n=st.integers(min_value=2, max_value=60))
def test_slope_of_a_line_is_exact(a: int, b: int, n: int) -> None:
    xs = list(range(n))
    slope, low, high, icpt = theil_sen(xs, [a * x + b for x in xs])
    assert slope == low == high == a
    assert icpt == b


@settings(max_examples=60)
@given(ys=series, c=ints, shift=st.integers(-50, 50))
def test_slope_is_equivariant_to_shifts_and_trends(ys: list[int], c: int, shift: int) -> None:
    xs = list(range(len(ys)))
    slope, _, _, icpt = theil_sen(xs, ys)
    moved, _, _, icpt_moved = theil_sen(xs, [y + c for y in ys])
    assert moved == pytest.approx(slope) and icpt_moved == pytest.approx(icpt + c)
    tilted, _, _, _ = theil_sen(xs, [y + shift * x for x, y in zip(xs, ys)])
    assert tilted == pytest.approx(slope + shift)


@settings(max_examples=60)
@given(ys=series, scale=st.integers(1, 1000), dx=ints)
def test_slope_scales_with_y_and_ignores_where_x_starts(ys: list[int], scale: int, dx: int) -> None:
    xs = list(range(len(ys)))
    slope, low, high, _ = theil_sen(xs, ys)
    s2, low2, high2, _ = theil_sen(xs, [scale * y for y in ys])
    assert (s2, low2, high2) == pytest.approx((scale * slope, scale * low, scale * high))
    s3, low3, high3, _ = theil_sen([x + dx for x in xs], ys)
    assert (s3, low3, high3) == pytest.approx((slope, low, high))


@settings(max_examples=60)
@given(ys=series)
def test_negating_y_negates_the_slope_and_mirrors_the_interval(ys: list[int]) -> None:
    xs = list(range(len(ys)))
    slope, low, high, _ = theil_sen(xs, ys)
    neg, nlow, nhigh, _ = theil_sen(xs, [-y for y in ys])
    assert neg == pytest.approx(-slope)
    assert (nlow, nhigh) == pytest.approx((-high, -low))


@settings(max_examples=60)
@given(ys=series, confidence=st.floats(0.5, 0.999))
def test_interval_holds_the_slope_and_widens_with_confidence(ys: list[int],
                                                            confidence: float) -> None:
    xs = list(range(len(ys)))
    slope, low, high, _ = theil_sen(xs, ys, confidence)
    assert low <= slope <= high
    _, low99, high99, _ = theil_sen(xs, ys, 0.9999)
    assert low99 <= low and high99 >= high


@settings(max_examples=60)
@given(ys=series)
def test_order_of_points_does_not_matter(ys: list[int]) -> None:
    xs = list(range(len(ys)))
    pairs = list(zip(xs, ys))[::-1]
    assert theil_sen([p[0] for p in pairs], [p[1] for p in pairs])[:3] == theil_sen(xs, ys)[:3]


@settings(max_examples=40)
@given(ys=st.lists(st.integers(-5000, 5000), min_size=4, max_size=60), slope=st.integers(-50, 50))
def test_autocorrelation_factor_never_narrows(ys: list[int], slope: int) -> None:
    xs = list(range(len(ys)))
    f = autocorrelation_factor(xs, ys, slope)
    assert f >= 1.0
    # It depends on the residuals' ranks only: shifting or scaling them changes nothing.
    assert autocorrelation_factor(xs, [3 * y + 7 for y in ys], 3 * slope) == pytest.approx(f)
    wide = theil_sen(xs, ys, autocorrelation=True)
    narrow = theil_sen(xs, ys)
    assert wide[1] <= narrow[1] and wide[2] >= narrow[2]


@given(v=st.lists(st.floats(-1e9, 1e9), min_size=1, max_size=50))
def test_median_splits_the_values(v: list[float]) -> None:
    m = median(v)
    assert sum(x < m for x in v) <= len(v) // 2 and sum(x > m for x in v) <= len(v) // 2


@given(ys=series, max_points=st.integers(3, 20))
def test_bin_medians_keep_at_most_max_points_in_order(ys: list[int], max_points: int) -> None:
    xs = list(range(len(ys)))
    bx, by = bin_medians(xs, ys, max_points)
    assert len(bx) == len(by) == min(len(xs), max_points)
    assert bx == sorted(bx) and min(ys) <= min(by) and max(by) <= max(ys)


@settings(max_examples=40)
@given(ys=series, scale=st.integers(1, 100))
def test_robust_noise_is_scale_equivariant(ys: list[int], scale: int) -> None:
    xs = list(range(len(ys)))
    s, _, _, c = theil_sen(xs, ys)
    sigma = robust_noise(xs, ys, s, c)
    assert sigma >= 0
    assert robust_noise(xs, [scale * y for y in ys], scale * s, scale * c) == pytest.approx(
        scale * sigma)


@settings(max_examples=30)
@given(ys=st.lists(st.integers(-1000, 1000), min_size=0, max_size=120))
def test_warmup_drops_at_most_half(ys: list[int]) -> None:
    k = auto_warmup(list(range(len(ys))), ys)
    assert 0 <= k <= len(ys) // 2


def test_warmup_finds_the_end_of_early_growth() -> None:
    xs = list(range(200))
    assert auto_warmup(xs, [3 * x for x in xs]) == 0  # a steady leak has no warm-up
    ramp = [min(x, 30) * 10_000 + (x * 7919 % 13) * 100 for x in xs]
    assert 25 <= auto_warmup(xs, ramp) <= 60
