"""Issue 28, repro 1: RLlib with the defaults and a leak of 5 KiB per episode: the live
alarm fires (goal: within 40 iterations of 2,000 steps), with a forecast time to out-of-memory,
and ``memprobe report`` on the EnvRunner's JSONL agrees."""

from __future__ import annotations

import math
import os
import sys

import pytest

pytest.importorskip("ray.rllib")

pytestmark = pytest.mark.rllib
BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


def test_five_kib_per_episode_alarms_live_with_the_defaults(ray_session) -> None:
    sys.path.insert(0, BENCHMARKS)
    try:
        from rllib_slow_leak import run
    finally:
        sys.path.remove(BENCHMARKS)
    # The goal is 40 iterations, met at 18-19 in runs here with the alarm's
    # persistence capped at 128 samples (benchmarks/rllib_slow_leak.py, docs/rllib.md).
    # The leak is per episode, and an iteration holds 4-30 episodes depending on how
    # fast PPO learns, so the test allows 60: it tests that the live alarm fires.
    r = run(5, 60, stop_at_alarm=True)
    assert r["first"] is not None, r["last"]  # alarmed live
    at = r["at_alarm"]
    assert at["process/rss_bytes/rate_per_hour"] > 0
    # A forecast, not the -1 of "not growing", nor the infinity that stands for it
    # among the EnvRunners' values until the driver's callback sets it back to -1.
    assert 0 < at["hours_to_oom"] < math.inf
    assert any(v.status == "leak" for v in r["verdicts"]), r["report"]
