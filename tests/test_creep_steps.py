"""A healthy process's creep beside a large allocator step is "growing slightly" at
every resolution (issue 24, "never wrong about a healthy job"): a rise under
:data:`memprobe.leak._verdicts.STEP_FLOOR_SHARE` of the floor is no step of its own, so
the RLlib adapter's live alarm (40 points) and ``memprobe report`` (80) both read a few
steps, where the report counted each small rise of the creep as one; a leak's steps, and
a leak's small rises beside a larger step, are still judged leaking."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memprobe
from memprobe.cli import main
from memprobe.keys import make_key
from memprobe.report._jsonl import read_samples
from series_shapes import MIB, replay_plugin

RSS = make_key("memprobe", "process", "rss_bytes")
#: A healthy Ray EnvRunner's resident size and what memprobe's checks kept, trimmed from
#: the red-team's learner_numpy diagnose run (tests/data/README.md).
CREEP = Path(__file__).parent / "data" / "envrunner_creep.jsonl"


def test_a_healthy_envrunners_creep_is_slight_in_the_report_as_in_the_live_alarm(capsys):
    """The EnvRunner grew +10.2 MiB over 390 s: a warm-up, one step of +2.8 MB, and a
    creep of small rises in memory it already held. The RLlib adapter's live alarm, on
    40 points, said "growing slightly"; ``memprobe report``, on 80, counted 14 rises and
    said ``LEAK +49.8 MiB/h, native``. Both now "growing slightly": grew in 5 steps at
    80 points, in 3 at 40."""
    assert main(["report", "--json", str(CREEP)]) == 0
    doc = json.loads(capsys.readouterr().out)
    (proc,) = doc["processes"]
    rss = next(m for m in proc["metrics"] if m["metric"] == "process/rss_bytes")
    assert not proc["leak"] and rss["status"] == "slight", rss["describe"]
    assert rss["note"] == "grew in 5 steps", rss["describe"]
    from memprobe_rllib._options import LEAK_OPTIONS

    samples = list(read_samples(str(CREEP)))
    for options, steps in (({}, 5), (dict(LEAK_OPTIONS), 3)):  # the report's, the alarm's
        v = memprobe.analyze_samples(samples, **options).verdicts[RSS]
        assert (v.status, v.note) == ("slight", f"grew in {steps} steps"), v.describe()


def test_the_live_alarm_stays_quiet_on_the_healthy_creep():
    """The same resident size (less what memprobe's checks kept) replayed through a
    Prober's live alarm with the RLlib adapter's options (history 200, a check every 20
    samples, 40 points): no alarm, and its report says "growing slightly"."""
    from memprobe_rllib._options import LEAK_OPTIONS

    series, own = [], 0.0
    for s in read_samples(str(CREEP)):
        own = s.values.get("memprobe/overhead/check_retained_bytes", own)
        if RSS in s.values:
            series.append(s.values[RSS] - own)
    pm = memprobe.get_plugin_manager(load_entrypoints=False, disable=["process"])
    pm.register(replay_plugin(series, "process", "rss_bytes"))
    fired: list[memprobe.Verdict] = []
    options = {**LEAK_OPTIONS, "metrics": ["process/rss_bytes"]}
    with memprobe.Prober(["process"], plugin_manager=pm, history=200, on_leak=fired.append,
                         leak_check_every=20, leak_options=options) as prober:
        for i in range(len(series)):
            prober.sample(step=i)
        v = prober.report(**options).get("process/rss_bytes")
    assert fired == [], [f.describe() for f in fired]
    assert v.status == "slight", v.describe()


def _creep_and_step(seed: int, n: int, step_bytes: float, creep_bytes: float,
                    leak_steps: int) -> list[float]:
    """500 MiB, one step of ``step_bytes`` in the middle half, ``creep_bytes`` in 30-60
    rises of 4-80 KiB at random samples, ``leak_steps`` kernel steps of 256 KiB evenly
    spaced, and a page of noise."""
    rng = random.Random(seed)
    lift = [0.0] * n
    lift[rng.randrange(n // 4, 3 * n // 4)] += step_bytes
    sizes = [rng.uniform(4, 80) * 1024 for _ in range(rng.randrange(30, 61))]
    for size in sizes:
        lift[rng.randrange(1, n)] += size * creep_bytes / sum(sizes)
    for k in range(leak_steps):
        lift[(k + 1) * n // (leak_steps + 1)] += 256 * 1024
    ys, level = [], 500.0 * MIB
    for i in range(n):
        level += lift[i]
        ys.append(level + 4096 * rng.randrange(2))
    return ys


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.floats(3.0, 4.0), st.floats(1.2, 1.8))
def test_a_step_beside_a_creep_under_the_floor_is_no_leak_at_any_resolution(
        seed: int, step_mib: float, creep_mib: float) -> None:
    """A step of 3-4 MiB and a creep of 1.2-1.8 MiB in small rises, judged against a
    floor of 2.5 MiB (0.5% of the process): without its step it grows less than the
    floor, at 40, 80 and 160 points alike. With every rise counted, 10 of 60 such
    series were leaks at 80 points and 12 at 160 (1 at 40)."""
    n, floor = 900, 2.5 * MIB
    ys = _creep_and_step(seed, n, step_mib * MIB, creep_mib * MIB, 0)
    for points in (40, 80, 160):
        v = memprobe.analyze(list(range(n)), ys, key="process/rss_bytes", min_growth=floor,
                             max_points=points)
        assert v.status != "leak", (points, v.describe())


@pytest.mark.parametrize("seed", range(5))
def test_a_slow_leak_beside_a_larger_step_is_still_a_leak(seed: int) -> None:
    """The same step and creep, and a leak in 14 of the kernel's 256 KiB steps (3.5 MiB,
    past the floor): its steps are counted (a tenth of the floor each), and so many are
    a leak at every resolution."""
    n, floor = 900, 2.5 * MIB
    ys = _creep_and_step(seed, n, 4 * MIB, 1.0 * MIB, 14)
    for points in (40, 80, 160):
        v = memprobe.analyze(list(range(n)), ys, key="process/rss_bytes", min_growth=floor,
                             max_points=points)
        assert v.status == "leak", (points, v.describe())
