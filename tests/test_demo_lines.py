"""The demo's printed lines (``memprobe_rllib.demo``), without Ray: an iteration whose
EnvRunner sample timed out prints no ``nan``, and a process with too few samples
ends the demo with the command that gives it a verdict."""
from __future__ import annotations

import inspect
import math
import re

import numpy as np
import pytest

import memprobe
from memprobe.keys import SAMPLE_SECONDS
from memprobe_rllib import demo

MIB = 2**20
NAN = float("nan")
RSS = "memprobe/process/rss_bytes"


def _result(runner: dict, driver_bytes: float = 300 * MIB) -> dict:
    return {"env_runners": runner, "memprobe/driver/process/rss_bytes": driver_bytes}


@pytest.mark.parametrize("nan", [NAN, np.float64("nan"), np.float32("nan")])
def test_a_timed_out_envrunner_says_so_and_prints_no_nan(nan) -> None:
    # RLlib's reduced values when no EnvRunner reported before sample() timed out:
    # NaN, which is truthy (the old line read the suspect flag as raised: "+nan MiB/hour").
    assert bool(nan)
    line = demo.iteration_line(7, 3.25, _result({
        "episode_return_mean": nan, RSS: nan,
        "memprobe/leak/suspect": nan, "memprobe/leak/rate_per_hour": nan}))
    assert "nan" not in line.lower(), line
    assert line.endswith("| no sample this iteration (timed out)"), line
    assert re.match(r"\s*7\s+3\.2s ", line), line  # the iteration column as before
    assert "300 MiB" in line


def test_a_nan_rate_with_a_raised_suspect_prints_no_nan() -> None:
    line = demo.iteration_line(2, 1.0, _result({
        "episode_return_mean": 21.5, RSS: 400 * MIB,
        "memprobe/leak/suspect": 1.0, "memprobe/leak/rate_per_hour": NAN}))
    assert "nan" not in line.lower() and "EnvRunner 1 suspects a leak" in line, line


def test_a_normal_iteration_line() -> None:
    line = demo.iteration_line(12, 10.0, _result({
        "episode_return_mean": 21.5, RSS: 400 * MIB, "memprobe/leak/suspect": 1.0,
        "memprobe/leak/rate_per_hour": 90 * MIB}))
    assert line == "12  10.0s    21.5 |    300 MiB |       400 MiB | EnvRunner 1 +90 MiB/hour"
    quiet = demo.iteration_line(1, 1.0, _result({
        "episode_return_mean": 9.0, RSS: 400 * MIB, "memprobe/leak/suspect": 0.0}))
    assert quiet.endswith("| none")
    assert demo.iteration_line(1, 1.0, _result({RSS: 400 * MIB}, driver_bytes=NAN)).count(
        "-") == 2  # the missing return and the NaN driver rss


def test_the_samples_a_verdict_needs_follow_the_analysis() -> None:
    min_points = inspect.signature(memprobe.analyze).parameters["min_points"].default
    assert demo.samples_for_a_verdict() == 2 * min_points  # warmup="auto"
    assert demo.samples_for_a_verdict({"min_points": 7, "warmup": None}) == 7


def _samples(count: int) -> list[memprobe.Sample]:
    # Real Prober samples carry their own cost (the key infer_prefix reads).
    return [memprobe.Sample(1000.0 + i, i, 1, {RSS: 100 * MIB + i,
                                               f"memprobe/{SAMPLE_SECONDS}": 1e-5})
            for i in range(count)]


def test_too_few_driver_samples_end_with_the_command_that_gives_a_verdict() -> None:
    needed = demo.samples_for_a_verdict()
    runs = {"memprobe-driver-0-1.jsonl": _samples(12),  # one per train() iteration
            "memprobe-env_runner-1-2.jsonl": _samples(300)}  # one per episode end
    assert demo.iterations_for_a_verdict(runs, 12) == needed
    lines = demo.run_longer(runs, 12)
    assert lines[-1].strip() == f"python3 -m nox -s demo -- --iterations {needed}"
    assert demo.run_longer(runs, 12, leak=True)[-1].endswith(f"--iterations {needed} --leak")
    summary = "\n".join(demo.summary(runs))
    assert f"not enough samples for a verdict (12 of {needed} samples)" in summary
    assert "nan" not in summary.lower()


def test_an_envrunner_short_of_samples_is_counted_at_its_rate() -> None:
    runs = {"memprobe-driver-0-1.jsonl": _samples(50),
            "memprobe-env_runner-1-2.jsonl": _samples(10)}  # 10 in 50 iterations
    more = demo.iterations_for_a_verdict(runs, 50)
    assert more == 50 + math.ceil((demo.samples_for_a_verdict() - 10) * 50 / 10)


def test_enough_samples_print_no_command() -> None:
    runs = {"memprobe-driver-0-1.jsonl": _samples(demo.samples_for_a_verdict())}
    assert demo.iterations_for_a_verdict(runs, 40) is None
    assert demo.run_longer(runs, 40) == []
