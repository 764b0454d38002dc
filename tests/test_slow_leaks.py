"""Slow leaks in long runs (issue 28): found with the defaults, at the scale that shows
them, with a slope right on step-like rss; a large growth that stopped is not "slight";
the alarm's false-alarm rate does not depend on how often it checks; growth that stops
(a long warm-up, a cache that fills and clears) does not alarm; a Prober without an
alarm judges every scale too."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memprobe
from memprobe.leak._alarm import PERSISTENCE_SAMPLES
from series_shapes import MIB, healthy, leaking, mixed_healthy, replay_alarms, replay_plugin

REPRO_2 = """
import json
import memprobe

ballast = [bytearray(1 << 20) for _ in range(200)]
for b in ballast:
    b[::4096] = b"\\1" * len(b[::4096])  # touched: resident
kept = []
alarms = []
with memprobe.Prober(probes=["process", "gc"], history=200, on_leak=alarms.append) as prober:
    for i in range(3000):
        kept.append(bytearray(5 * 1024))
        prober.sample(step=i)
    rss = prober.report().get("process/rss_bytes")
print(json.dumps({"alarms": [v.metric for v in alarms], "status": rss.status,
                  "slope": rss.slope_per_step, "span_points": rss.span_points,
                  "hours_to_oom": rss.hours_to_oom, "describe": rss.describe()}))
"""


def test_a_process_holding_hundreds_of_mib_keeping_5_kib_per_sample_alarms() -> None:
    """Issue 28, repro 2: a process holding 200 MiB keeps 5 KiB per sample, with
    ``history=200``. rss grows in allocator steps (most samples see no growth, then a
    step of ~230 KiB); the alarm fires and the report says leak near 5,120 B/sample.
    A fresh interpreter: in a test process that freed memory before, the kept blocks
    would reuse it and rss would not grow at all."""
    out = subprocess.run([sys.executable, "-c", REPRO_2], capture_output=True, text=True,
                         check=True, timeout=300)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert "process/rss_bytes" in r["alarms"], r
    assert r["status"] == "leak", r["describe"]
    assert 0.8 * 5120 < r["slope"] < 1.25 * 5120, r["describe"]
    assert r["span_points"] > 200 and "over the last" in r["describe"]
    assert r["hours_to_oom"] is not None and r["hours_to_oom"] > 0


def test_a_large_growth_then_flat_grew_then_stopped_never_slight() -> None:
    """Issue 29, item 0: rss from 516 MiB to 2.5 GiB in the first part, then flat. A
    warm-up that large is no warm-up: ``grew 2.0 GiB, then stopped``."""
    rng = random.Random(3)
    mib = 1 << 20
    ys = [516 * mib + min(i, 40) * 51 * mib + rng.randrange(4096) * 64 for i in range(400)]
    v = memprobe.analyze(list(range(400)), ys, key="memprobe/process/rss_bytes",
                         min_growth=0.005 * ys[-1])
    assert v.status == "levelled", v.describe()
    assert "grew 2.0 GiB, then stopped" in v.describe(), v.describe()
    assert "slightly" not in v.describe()
    # Same through analyze_samples, with times (the Ray test's JSONL: 0.5 s per sample).
    samples = [memprobe.Sample(1000.0 + 0.5 * i, i, 1, {"memprobe/process/rss_bytes": y})
               for i, y in enumerate(ys)]
    r = memprobe.analyze_samples(samples).get("process/rss_bytes")
    assert r.status == "levelled" and "then stopped" in r.note, r.describe()


def _alarms(series: list[float], check_every: int) -> list[int]:
    """The samples at which ``series``, a metric of its own (floor 16 KiB), alarms."""
    return [i for i, _ in replay_alarms(series, check_every=check_every, probe="replay",
                                        metric="level_bytes")]


@pytest.mark.parametrize("check_every", [2, 5, 20])
def test_checking_more_often_raises_no_more_false_alarms(check_every: int) -> None:
    """Issue 24: confirmations count checks that saw new evidence (40 samples apart),
    not checks: at every ``leak_check_every``, healthy series never alarm, and a leak
    alarms at about the same sample."""
    for seed in range(3):
        assert _alarms(mixed_healthy(seed, 3000), check_every) == [], seed
    leak = [1e9 + 3000 * ((i * 7) % 5) + (8192 * (i - 300) if i > 300 else 0)
            for i in range(1200)]
    first = _alarms(leak, check_every)
    # Judged leaking within 400 samples, then confirmed over PERSISTENCE_SAMPLES more.
    assert first and 300 < first[0] < 300 + 400 + PERSISTENCE_SAMPLES, first


@pytest.mark.parametrize("check_every", [2, 5, 20])
@pytest.mark.parametrize("kind", ["long ramp", "sawtooth", "warm-up"])
def test_growth_that_stops_does_not_alarm(kind: str, check_every: int) -> None:
    """A long warm-up (8 MiB over 200 samples, then flat) and a cache that fills 4 MiB
    over 400 samples, then clears, are as steep as a leak while they grow: judged
    leaking from sample 100 (the ramp) and 340 (the cache's first fill), they alarmed
    at 139 and 379 before the alarm asked a growth to go on 1.5 times the scale it was
    first seen at. Replayed as the resident size of a 500 MiB process through a
    Prober's live alarm at the adapter's history (200)."""
    fired = replay_alarms(healthy(kind, 3000), check_every=check_every)
    assert fired == [], [(i, v.describe()) for i, v in fired]


def test_bursty_growth_under_the_floor_does_not_alarm() -> None:
    """A level that rises to 2 MiB over 20,000 samples, halved every other 1,000, then
    flat: under 0.5% of the process it stands in, it is no leak at any scale."""
    assert replay_alarms(healthy("bursty", 24_000), check_every=20) == []


def test_a_staircase_of_a_few_plateaus_does_not_alarm() -> None:
    """Steps of 2 MiB every 5,000 samples, 6 of them, then flat: judged leaking at the
    whole run's scale from sample 16,140 (three steps, +5.7 MiB, the last quarter
    holding the third), it alarmed at 16,419 before a growth made of fewer than
    MIN_RISES rises was "slight". Replayed up to 36,000 samples (past the last step's
    leaking stretch, 30,000-31,200)."""
    fired = replay_alarms(healthy("plateaus", 36_000), check_every=20)
    assert fired == [], [(i, v.describe()) for i, v in fired]


def test_growth_in_a_few_steps_is_slight_and_says_so() -> None:
    """The rule on its own: three steps of 2 MiB with flat treads are "slight", "grew in
    3 steps"; the same growth as a steady climb (or in MIN_RISES allocator steps and
    more) is a leak; and a climb with three steps on top of it stays a leak (taking
    the steps out leaves a growth past the floor)."""
    from memprobe.leak._verdicts import MIN_RISES

    rng = random.Random(3)
    xs = list(range(600))
    floor = 2.5 * MIB
    noise = [rng.gauss(0, 30_000) for _ in xs]
    # Steps at 150, 330 and 510: the last quarter holds one, so it is not levelled off.
    stairs = [500 * MIB + 2 * MIB * ((x + 30) // 180) + e for x, e in zip(xs, noise)]
    v = memprobe.analyze(xs, stairs, key="process/rss_bytes", min_growth=floor)
    assert v.status == "slight" and v.note == "grew in 3 steps", v.describe()
    climb = [500 * MIB + 6 * MIB * x / 600 + e for x, e in zip(xs, noise)]
    assert memprobe.analyze(xs, climb, key="process/rss_bytes",
                            min_growth=floor).status == "leak"
    step = 6 * MIB / MIN_RISES
    # MIN_RISES steps: at 67, 133, ... 533.
    pages = [500 * MIB + step * (x * (MIN_RISES + 1) // 600) + e for x, e in zip(xs, noise)]
    assert memprobe.analyze(xs, pages, key="process/rss_bytes",
                            min_growth=floor).status == "leak"
    both = [a + b - 500 * MIB for a, b in zip(stairs, climb)]
    assert memprobe.analyze(xs, both, key="process/rss_bytes",
                            min_growth=floor).status == "leak"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-10**6, 10**6), min_size=4, max_size=80),
       st.integers(-10**9, 10**9), st.sampled_from([1, 2, 1024]))
def test_jumps_do_not_depend_on_the_level_or_the_unit(ys: list[int], shift: int,
                                                      scale: int) -> None:
    """What is a jump does not depend on where the series sits, nor on its unit (a rise
    stands out of the series' own changes, not out of a fixed size): the same jumps for
    ``scale * y + shift`` (a power of two and integers: exact in floats). A steady
    climb, however steep, has none."""
    from memprobe.leak._verdicts import _jumps

    assert _jumps([scale * y + shift for y in ys]) == _jumps(ys)
    assert _jumps([shift + scale * i for i in range(len(ys))]) == []


@pytest.mark.parametrize("percent_per_1000", [2, 10])
def test_a_leak_as_steep_as_those_still_alarms(percent_per_1000: int) -> None:
    """Leaks at 2% and 10% of the process per 1,000 samples (10 and 51 KiB per sample)
    through the same path: alarmed within 1.5 times the samples they needed to be
    judged leaking, plus the checks' spacing."""
    per_sample = percent_per_1000 / 100 * 500 * MIB / 1000
    fired = replay_alarms(leaking(per_sample, 3000), stop_at_first=True)
    assert fired, "no alarm"
    i, v = fired[0]
    assert i < (250 if percent_per_1000 == 10 else 1000), (i, v.describe())
    assert v.metric == "process/rss_bytes" and 0.5 * per_sample < v.slope_per_step


REPRO_PLAIN = """
import json
import memprobe

ballast = [bytearray(1 << 20) for _ in range(200)]
for b in ballast:
    b[::4096] = b"\\1" * len(b[::4096])  # touched: resident
kept = []
with memprobe.Prober(probes=["process", "gc"], history=200) as prober:
    for i in range(3000):
        kept.append(bytearray(5 * 1024))
        prober.sample(step=i)
    rss = prober.report().get("process/rss_bytes")
print(json.dumps({"status": rss.status, "slope": rss.slope_per_step,
                  "span_points": rss.span_points, "describe": rss.describe()}))
"""


def test_a_prober_without_an_alarm_judges_the_whole_run() -> None:
    """Issue 28, repro 2 without ``on_leak``: a process holding 200 MiB keeps 5 KiB per
    sample for 3,000 samples, ``history=200``. Its report judges every time scale of
    the run, not the last 200 samples (under the 0.5% floor: "growing slightly"): a
    leak near 5,120 B/sample, over thousands of samples."""
    out = subprocess.run([sys.executable, "-c", REPRO_PLAIN], capture_output=True, text=True,
                         check=True, timeout=300)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["status"] == "leak", r["describe"]
    assert r["span_points"] > 1000 and "over the last" in r["describe"], r["describe"]
    assert 0.8 * 5120 < r["slope"] < 1.25 * 5120, r["describe"]


def test_a_prober_without_an_alarm_keeps_bounded_tiers_and_counts_them_as_its_own() -> None:
    """The plain Prober's tiers: one bounded series per judged metric, fed in batches
    before the history (of 10 here) drops the samples, their memory recorded as
    memprobe's (``overhead/check_retained_bytes``, subtracted from the resident size)."""
    from memprobe.leak._tiers import BYTES_PER_SERIES

    series = leaking(2000, 5000)
    pm = memprobe.get_plugin_manager(load_entrypoints=False, disable=["process"])
    pm.register(replay_plugin(series, "process", "rss_bytes"))
    retained = []
    with memprobe.Prober(["process"], plugin_manager=pm, history=10) as prober:
        for i in range(len(series)):
            values = prober.sample(step=i)
            retained.append(values.get("memprobe/overhead/check_retained_bytes"))
        feed = prober._judging
        v = prober.report().get("process/rss_bytes")
        tiers = feed.tiers
    key = "memprobe/process/rss_bytes"
    assert tiers.count == 5000 and list(tiers.series) == [key]
    assert tiers.series[key].count == 5000
    assert 0 < feed.retained < 2 * BYTES_PER_SERIES, feed.retained
    assert feed.retained in retained  # in the sample after the batch that kept it
    assert v.status == "leak" and v.span_points > 4000, v.describe()
    assert 0.9 * 2000 < v.slope_per_step < 1.1 * 2000, v.describe()
