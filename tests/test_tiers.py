"""The history at every time scale: bounded memory, the whole run in the top tier, and
the same tiers whether fed at each check or all at once."""

from __future__ import annotations

import random
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

import memprobe
from memprobe.engine._tier_feed import FED
from memprobe.leak._series import judged_keys
from memprobe.leak._tiers import BINS, BYTES_PER_SERIES, FIRST, RAW, TieredSeries
from series_shapes import replay_plugin


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


def test_the_alarm_and_a_report_on_every_sample_judge_the_same_tiers() -> None:
    """The live alarm feeds its tiers at each check from a history of 100 samples; a
    report on all the samples (as ``memprobe report`` reads a file) builds them at
    once: the verdicts agree, at the scale far longer than the history."""
    # Flat, then a leak of 300 B/sample: 0.03% of the level per 1,000 samples.
    series = [1e9 + 3000 * ((i * 7) % 5) + (300 * (i - 2000) if i > 2000 else 0)
                      for i in range(12_000)]
    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(replay_plugin(series, "replay", "level_bytes"))
    fired: list[int] = []
    samples = []
    options = {"metrics": ["replay/level_bytes"], "min_growth_fraction": 0.0}
    with memprobe.Prober(["replay"], plugin_manager=pm, history=100,
                         on_leak=lambda v: fired.append(i), leak_check_every=20,
                         leak_options=options) as prober:
        for i in range(len(series)):
            prober.sample(step=i)
            samples.append(prober.history[-1])  # as a JSONL sink would write it
        live = prober.report(**options).get("replay/level_bytes")
    offline = memprobe.analyze_samples(samples, **options).get("replay/level_bytes")
    assert live == offline
    assert live.status == "leak" and abs(live.slope_per_step - 300) < 30, live.describe()
    assert live.span_points > 1000  # judged beyond the 100 samples the history holds
    assert fired and fired[0] > 2000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 1500), min_size=1, max_size=12), st.integers(0, 2**32))
def test_extending_by_batches_is_appending_each_point(batches: list[int], seed: int) -> None:
    """``extend`` (in slices, for a batch of samples) leaves the series as ``append`` of
    each point would: the raw points, every tier, the bins pending."""
    rng = random.Random(seed)
    one, batched = TieredSeries(), TieredSeries()
    n = 0
    for m in batches:
        xs = [float(n + i) for i in range(m)]
        ts = [1000.0 + 0.5 * x for x in xs]
        ys = [rng.uniform(-1e9, 1e9) for _ in xs]
        for x, t, y in zip(xs, ts, ys):
            one.append(x, t, y)
        batched.extend(xs, ts, ys)
        n += m
    assert batched.count == one.count == n
    assert batched.raw.points() == one.raw.points()
    assert [t.points() for t in batched.tiers] == [t.points() for t in one.tiers]
    assert batched.pushes == one.pushes
    assert [(p.n, list(p.ys)[:p.n]) for p in batched._pending] == \
        [(p.n, list(p.ys)[:p.n]) for p in one._pending]


#: A memray window's keys in a sample: opened, still open, closed (with its own memory).
_MEMRAY = {None: {}, "open": {"memprobe/memray/window_active": 1},
           "active": {"memprobe/memray/window_active": 1},
           "close": {"memprobe/memray/window_active": 0, "memprobe/memray/own_bytes": 7e6}}


def _memray_values(event: str | None, i: int) -> dict[str, float]:
    values = dict(_MEMRAY[event])
    if "memprobe/memray/own_bytes" in values:
        values["memprobe/memray/own_bytes"] += 1000 * i
    return values


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(1e8, 1e9), st.booleans(), st.booleans(), st.booleans(),
                          st.sampled_from(sorted(_MEMRAY, key=str))),
                min_size=1, max_size=400))
def test_a_prober_without_an_alarm_feeds_what_a_report_on_every_sample_reads(rows) -> None:
    """A Prober without ``on_leak`` takes each sample's resident size less memprobe's own
    memory as the sample is made (:class:`TierFeed`); a report on all the samples (as
    ``memprobe report`` reads a file) reads them with ``sample_series``: the same tiers,
    whichever samples carry tracemalloc's, the tiers' or the memray windows' own memory
    or were read while a memray window was open, with or without a step."""
    from memprobe.engine._tier_feed import TierFeed

    feed = TierFeed("memprobe")
    samples = []
    for i, (rss, traced, retained, stepped, memray) in enumerate(rows):
        values = {"memprobe/process/rss_bytes": rss, "memprobe/gc/garbage_count": 0,
                  **_memray_values(memray, i)}
        if traced:
            values.update({"memprobe/tracemalloc/overhead_bytes": 1000 + i,
                           "memprobe/tracemalloc/traced_bytes": 5000 + 7 * i,
                           "memprobe/tracemalloc/filtered_bytes": 4000})
        if retained:
            values["memprobe/overhead/check_retained_bytes"] = 30_000 + i
        step = 3 * i if stepped else None
        feed.after_sample(values, 1000.0 + i, step, 1)
        samples.append(memprobe.Sample(1000.0 + i, step, 1, values))
    fed = feed.absorb()
    offline = memprobe.Tiers()
    offline.feed(samples, "memprobe", judged_keys("memprobe", None, sites=False),
                 lambda k: k.split("/", 1)[1] in FED)
    # Every judged metric the samples have, the resident size less memprobe's own memory.
    keys = {"memprobe/process/rss_bytes", "memprobe/gc/garbage_count"}
    if any(traced for _, traced, _, _, _ in rows):
        keys |= {"memprobe/tracemalloc/traced_bytes", "memprobe/tracemalloc/filtered_bytes"}
    # The resident size is missing from both when every sample was read inside a window.
    assert set(fed.series) - {"memprobe/process/rss_bytes"} == \
        set(offline.series) - {"memprobe/process/rss_bytes"} == \
        keys - {"memprobe/process/rss_bytes"}
    assert ("memprobe/process/rss_bytes" in fed.series) == \
        ("memprobe/process/rss_bytes" in offline.series)
    assert fed.count == offline.count == len(rows)
    for key in set(fed.series):
        assert fed.series[key].raw.points() == offline.series[key].raw.points(), key
        assert [t.points() for t in fed.series[key].tiers] == \
            [t.points() for t in offline.series[key].tiers], key


def test_a_plain_probers_tiers_of_every_judged_metric_stay_bounded_over_a_million_samples(
        ) -> None:
    """The bound for a Prober without an alarm (:class:`TierFeed`): a series per judged
    metric (all of :data:`FED` in every sample), made at the first batch; the last
    50,000 of 1,000,000 samples keep nothing more, and the whole run is in the top
    tier of each."""
    from memprobe.engine._tier_feed import TierFeed
    from memprobe.leak._alarm import check_memory_bytes

    feed = TierFeed("memprobe")
    values: dict[str, float] = {f"memprobe/{m}": 0.0 for m in FED}
    keys = list(values)

    def run(start: int, stop: int) -> None:
        for i in range(start, stop):
            for j, k in enumerate(keys):
                values[k] = 1e8 + 5120.0 * i + j + (i * 7919 % 13) * 4096
            feed.after_sample(values, 1000.0 + i, i, 1)

    check_memory_bytes()  # what a batch reads: its modules imported before the tracing
    # Traced over the first 2,000 samples (what the feed keeps) and the last 50,000
    # (what it keeps more); not between, which only makes the run slower.
    tracemalloc.start()
    try:
        run(0, 2000)
        early = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    run(2000, 950_000)
    tracemalloc.start()
    try:
        run(950_000, 1_000_000)  # ends on a batch fed: no columns pending
        late = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    tiers = feed.absorb()
    assert set(tiers.series) == set(keys) and len(keys) == len(FED) >= 10
    # The series' arrays (and their array objects) and one batch's columns.
    assert len(FED) * BYTES_PER_SERIES <= early <= len(FED) * (BYTES_PER_SERIES + 12_288), early
    # Nothing grows with the run's length: what the tracing sees kept is the counters
    # (ints) and latest values each series holds in place of those it held before.
    assert late <= 512 * len(FED), (early, late)
    for key, series in tiers.series.items():
        assert series.count == 1_000_000, key
        xs = list(series.scales(40))[-1][0]
        assert xs[0] < 0.01 * 1_000_000 and xs[-1] > 0.99 * 1_000_000, key


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1e8, 1e9), st.sampled_from(sorted(_MEMRAY, key=str))),
                min_size=1, max_size=200),
       st.lists(st.integers(1, 60), min_size=1, max_size=8))
def test_resident_sizes_read_while_a_memray_window_tracks_are_not_judged(rows, parts) -> None:
    """A memray window's memory is in the resident size while it tracks, by an amount
    known only at its close: the resident sizes read from the sample after the one that
    opened it to the one that closed it are not judged, and those after it are judged less
    what its windows left (``memray/own_bytes``). The same fed at once or in parts (the
    live alarm feeds the samples new at each check)."""
    from memprobe.leak._series import sample_series

    samples = [memprobe.Sample(1000.0 + i, i, 1, {"memprobe/process/rss_bytes": rss,
                                                  **_memray_values(memray, i)})
               for i, (rss, memray) in enumerate(rows)]
    expected: list[tuple[float, float]] = []
    tracking, own = False, 0.0
    for i, (rss, memray) in enumerate(rows):
        inside, values = tracking, _memray_values(memray, i)
        if "memprobe/memray/window_active" in values:
            tracking = values["memprobe/memray/window_active"] == 1
        own = values.get("memprobe/memray/own_bytes", own)
        if not inside:
            expected.append((float(i), rss - own))
    keep = judged_keys("memprobe", None, sites=False)
    whole, _, _ = sample_series(samples, "memprobe", keep)
    xs, ys, _ts = whole.get("memprobe/process/rss_bytes", ([], [], []))
    assert list(zip(xs, ys)) == expected
    tiers, start = memprobe.Tiers(), 0
    for n in [*parts, len(samples)]:
        tiers.feed(samples[start:start + n], "memprobe", keep)
        start += n
    assert tiers.count == len(samples)
    fed = tiers.series.get("memprobe/process/rss_bytes")
    fed_xs, _fed_ts, fed_ys = fed.raw.points() if fed else ([], [], [])
    assert list(zip(fed_xs, fed_ys)) == expected


_CHURN: list[bytes] = []


def test_the_alarms_tiers_keep_the_judged_metrics_not_each_windows_sites() -> None:
    """Tracemalloc windows over code that keeps a block at a new line now and then (each
    window's survivors at sites no window saw before): the alarm's tiers hold the
    judged metrics only. Each surviving site's series was kept for good before (a
    healthy RLlib EnvRunner's memprobe objects grew 0.9 MB over 130 iterations)."""
    namespace: dict = {"_CHURN": _CHURN}
    lines = "\n".join(f"def keep{i}():\n    _CHURN.append(bytes({1000 + i}))" for i in range(60))
    exec(compile(lines, "churn_sites.py", "exec"), namespace)
    prober = memprobe.Prober(
        probes={"process": {}, "gc": {"blocks": True},
                "tracemalloc": {"window_steps": 2, "period_steps": 4}},
        on_leak=lambda v: None, leak_check_every=20, load_entrypoints=False,
        capture_on_leak=False, history=200)
    try:
        with prober:
            for step in range(1200):
                if step % 4 == 1:
                    namespace[f"keep{(step // 4) % 60}"]()
                    if len(_CHURN) > 30:
                        del _CHURN[:10]
                prober.sample(step)
        judged = set(prober.alarm.options.get("metrics") or FED)
        kept = {k.split("/", 1)[1] for k in prober.alarm.tiers.series}
        assert kept <= judged | {"process/rss_bytes"}, kept - judged
        assert any(k.startswith("memprobe/tracemalloc/survivors/churn_sites.py")
                   for s in prober.history for k in s.values)  # the windows saw them
    finally:
        _CHURN.clear()
