"""The history at every time scale: bounded memory, the whole run in the top tier, and
the same tiers whether fed at each check or all at once."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

import memprobe
from memprobe.leak._tiers import BINS, BYTES_PER_SERIES, FIRST, RAW, TieredSeries


def _feed(series: TieredSeries, start: int, stop: int) -> None:
    for i in range(start, stop):
        series.append(float(i), 1000.0 + i, 1e8 + 5120.0 * i + (i * 7919 % 13) * 4096)


def test_a_million_samples_take_no_more_memory_than_the_first_few() -> None:
    """The bound: every array is allocated when the series is made, so the memory after
    1,000,000 samples is what it was after 1,000 (measured with tracemalloc)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        series = TieredSeries()
        made = tracemalloc.get_traced_memory()[0] - before
        _feed(series, 0, 1000)
        early = tracemalloc.get_traced_memory()[0] - before
        _feed(series, 1000, 1_000_000)
        late = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert BYTES_PER_SERIES <= made <= BYTES_PER_SERIES + 8192, made  # the stated bound
    assert late <= early + 1024, (early, late)  # nothing grows with the run's length
    assert series.count == 1_000_000
    scales = list(series.scales(40))
    # The longest scale spans the whole run; the shortest is the latest raw points.
    xs, ts, ys = scales[-1]
    assert xs[0] < 0.01 * 1_000_000 and xs[-1] > 0.99 * 1_000_000
    assert scales[0][0] == [float(i) for i in range(1_000_000 - RAW, 1_000_000)]
    # Each scale reads the slope of the series: 5,120 per step.
    for xs, _, ys in scales:
        slope = (ys[-1] - ys[0]) / (xs[-1] - xs[0])
        assert abs(slope - 5120) < 0.05 * 5120


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e9, 1e9), min_size=1, max_size=3000))
def test_every_scale_is_in_order_and_within_the_values(values: list[float]) -> None:
    series = TieredSeries()
    for i, v in enumerate(values):
        series.append(float(i), float(i), v)
    lo, hi = min(values), max(values)
    spans = []
    for xs, ts, ys in series.scales(1):
        assert xs == sorted(xs) and ts == sorted(ts)
        assert all(lo - 1e-6 <= y <= hi + 1e-6 for y in ys)
        spans.append(xs[-1] - xs[0])
    assert spans == sorted(spans)  # shortest first
    assert len(list(series.scales(1))[0][0]) == min(len(values), RAW)


def test_a_bin_is_the_median_of_its_points() -> None:
    series = TieredSeries()
    for i in range(FIRST):
        series.append(float(i), float(i), 1e9 if i == 3 else 10.0)  # one spike
    xs, ts, ys = series.tiers[0].points()
    assert ys == [10.0]  # the spike does not move the bin
    assert series.tiers[0].n == 1 and BINS >= 40


class _Replay:
    """A probe that returns the next value of a fixed series, as ``level_bytes``."""

    series: list[float] = []

    def __init__(self) -> None:
        self.i = 0

    def start(self) -> None: ...
    def stop(self) -> None: ...

    def sample(self) -> dict:
        self.i += 1
        return {"level_bytes": self.series[(self.i - 1) % len(self.series)]}


class _ReplayPlugin:
    @memprobe.hookimpl
    def memprobe_register_probes(self, register) -> None:
        register("replay", _Replay)


def test_the_alarm_and_a_report_on_every_sample_judge_the_same_tiers() -> None:
    """The live alarm feeds its tiers at each check from a history of 100 samples; a
    report on all the samples (as ``memprobe report`` reads a file) builds them at
    once: the verdicts agree, at the scale far longer than the history."""
    # Flat, then a leak of 300 B/sample: 0.03% of the level per 1,000 samples.
    _Replay.series = [1e9 + 3000 * ((i * 7) % 5) + (300 * (i - 2000) if i > 2000 else 0)
                      for i in range(12_000)]
    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(_ReplayPlugin())
    fired: list[int] = []
    samples = []
    options = {"metrics": ["replay/level_bytes"], "min_growth_fraction": 0.0}
    with memprobe.Prober(["replay"], plugin_manager=pm, history=100,
                         on_leak=lambda v: fired.append(i), leak_check_every=20,
                         leak_options=options) as prober:
        for i in range(len(_Replay.series)):
            prober.sample(step=i)
            samples.append(prober.history[-1])  # as a JSONL sink would write it
        live = prober.report(**options).get("replay/level_bytes")
    offline = memprobe.analyze_samples(samples, **options).get("replay/level_bytes")
    assert live == offline
    assert live.status == "leak" and abs(live.slope_per_step - 300) < 30, live.describe()
    assert live.span_points > 1000  # judged beyond the 100 samples the history holds
    assert fired and fired[0] > 2000
