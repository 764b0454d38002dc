"""The replay of benchmarks/rllib_healthy_long.py (issues 24 and 28): a process's recorded
JSONL fed through the adapter's alarm gives the live leak keys again, iteration by
iteration, and a real leak is found at every ``leak_check_every`` (no Ray cluster needed)."""

from __future__ import annotations

import glob
import os
import sys
import time

import pytest

pytest.importorskip("ray.rllib")

import memprobe
from memprobe_rllib import CallbackOptions
from memprobe_rllib._process import ProcessProber

pytestmark = pytest.mark.rllib
BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


@pytest.fixture(scope="module")
def replay_module():
    sys.path.insert(0, BENCHMARKS)
    try:
        import rllib_healthy_long
    finally:
        sys.path.remove(BENCHMARKS)
    return rllib_healthy_long


def _live(tmp_path, kib_per_sample: int) -> tuple[list[dict[str, float]], list[float], str]:
    """An EnvRunner-like ProcessProber with the adapter's defaults (leak_check_every=20)
    keeping ``kib_per_sample`` KiB per sample: its leak keys and their times at each
    "iteration" of 10 samples, and its JSONL."""
    pp = ProcessProber(CallbackOptions(jsonl=str(tmp_path)), "env_runner", 1,
                       prefix="memprobe", step_name="a test step").start()
    kept = []
    rows, times = [], []
    try:
        for i in range(1, 501):
            kept.append(bytearray(kib_per_sample * 1024))
            pp.log.add(pp.sample(i))  # as the callback does: the keys it has seen
            time.sleep(float(os.environ.get("RLLONG_SLEEP", "0.001")))
            if i % 10 == 0:
                head = "memprobe/leak/"
                rows.append({k[len(head):]: v for k, v in pp.leak_values().items()})
                times.append(time.time())
    finally:
        pp.prober.stop()
    (path,) = glob.glob(os.path.join(tmp_path, "memprobe-env_runner-1-*.jsonl"))
    return rows, times, path


def test_replay_gives_the_live_keys_again_and_finds_the_leak_at_every_cadence(
        tmp_path, replay_module) -> None:
    live, times, path = _live(tmp_path, 256)
    alarmed_live = [i for i, r in enumerate(live, 1) if replay_module.alarm_keys(r, "")]
    assert alarmed_live, live[-1]  # 128 MiB over 500 samples: the live alarm fired
    samples = memprobe.read_samples(path)
    flush = replay_module._flush_points(samples, times)
    at_live = replay_module.replay_process(samples, "memprobe", "env_runner", flush, 20)
    assert replay_module.differences(live, at_live["keys"]) == []
    assert at_live["alarms"] == alarmed_live
    for every in (2, 5, 50):
        other = replay_module.replay_process(samples, "memprobe", "env_runner", flush, every)
        assert other["alarms"], every
        # Checks count at least 40 samples apart, and a leak must persist over 1.5 times
        # its scale (at most 128 samples): the first alarm comes within that of the live
        # one, whatever the cadence.
        assert abs(other["alarms"][0] - alarmed_live[0]) <= 10, (every, other["alarms"])


def test_a_replay_of_a_steady_process_raises_nothing(tmp_path, replay_module) -> None:
    live, times, path = _live(tmp_path, 0)
    samples = memprobe.read_samples(path)
    flush = replay_module._flush_points(samples, times)
    assert not any(replay_module.alarm_keys(r, "") for r in live)
    for every in (2, 5, 20):
        replayed = replay_module.replay_process(samples, "memprobe", "env_runner", flush, every)
        assert replayed["alarms"] == []
        assert replayed["checks"] >= 10  # 500 samples: judged, not skipped
        if every == 20:
            assert replay_module.differences(live, replayed["keys"]) == []
