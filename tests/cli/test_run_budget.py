"""``memprobe run --budget``: sampling takes at most that fraction of the run's wall time.

After its first ``UNBUDGETED_SAMPLES`` (what a verdict needs, taken at ``--interval``,
unless they take ``UNBUDGETED_SECONDS`` of CPU time first), a sample that took ``d``
seconds of the sampler's CPU time is followed by a wait of at least ``d / budget - d``.
The law is checked from what the run wrote, not from a clock's
threshold: a plugin probe (a real one, installed through an entry point) walks every
gc-tracked object of the program and reports the CPU seconds its own walk took, a lower
bound of the sample's; so the time between two samples' records is at least
``c / budget - c`` after a sample whose probe took ``c``, however loaded the machine is
(load only lengthens the waits).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memprobe.cli._run import DEFAULT_RUN_BUDGET, UNBUDGETED_SAMPLES, UNBUDGETED_SECONDS, Sampler

#: Keeps 300,000 gc-tracked objects alive, so that each walk of them takes milliseconds,
#: and runs long enough for the samples taken at --interval and a dozen after them.
PROGRAM = """\
import time
held = [[i] for i in range(300_000)]
end = time.monotonic() + 4
while time.monotonic() < end:
    time.sleep(0.005)
"""

#: A probe that walks every gc-tracked object and reports the CPU time of its walk.
WALKER = """\
import gc
import time

import memprobe
from memprobe.metrics import Metric


class WalkProbe:
    metrics = {"cpu_seconds": Metric("CPU time of this sample's walk", "seconds"),
               "objects_count": Metric("gc-tracked objects walked", "count")}

    def start(self):
        pass

    def stop(self):
        pass

    def sample(self):
        t0 = time.thread_time()
        n = sum(1 for _ in gc.get_objects())
        return {"cpu_seconds": time.thread_time() - t0, "objects_count": n}


@memprobe.hookimpl
def memprobe_register_probes(register):
    register("walk", WalkProbe)
"""
CPU_KEY = "memprobe/walk/cpu_seconds"

#: The clocks the records and the waits use differ (time.time, the monotonic clock):
#: slack for their rates and the records' rounding.
SLACK_SECONDS = 2e-3


def run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    site = tmp_path / "site"
    info = site / "memprobe_walk-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: memprobe-walk\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[memprobe]\nwalk = mpf_walk\n")
    (site / "mpf_walk.py").write_text(WALKER)
    (tmp_path / "p.py").write_text(PROGRAM)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    res = subprocess.run(
        [sys.executable, "-m", "memprobe", "run", "--probes", "process,walk",
         "--interval", "0.001", *args, "-o", "out.jsonl", "p.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    return res, rows


def shortfalls(rows: list[dict], budget: float) -> list[float]:
    """For each pair of successive samples, how much sooner the second came than the
    budget's law allows (positive: the law broken). The exit sample is left out: the
    program's end cuts the wait before it short; so are the samples taken at
    ``--interval`` before the budget applies."""
    out = []
    rows = rows[UNBUDGETED_SAMPLES - 1:-1]
    for a, b in zip(rows, rows[1:]):
        c = a["values"][CPU_KEY]
        out.append(c / budget - c - (b["time"] - a["time"]))
    return out


def test_each_wait_keeps_sampling_within_the_budget(tmp_path: Path) -> None:
    res, rows = run(tmp_path, "--budget", "0.1")
    assert len(rows) >= UNBUDGETED_SAMPLES + 4
    assert min(r["values"][CPU_KEY] for r in rows) > 0.0  # the walks cost: the law binds
    assert max(shortfalls(rows, 0.1)) <= SLACK_SECONDS, shortfalls(rows, 0.1)
    # The first samples came at --interval, sooner than the budget would space them.
    first = rows[:UNBUDGETED_SAMPLES]
    assert first[-1]["time"] - first[0]["time"] < sum(
        r["values"][CPU_KEY] / 0.1 for r in first[:-1])
    # The walks' CPU time over the run's wall time, from the first budgeted walk's
    # start to the last sample before the exit: within the budget.
    budgeted = rows[UNBUDGETED_SAMPLES - 1:]
    cpu = [r["values"][CPU_KEY] for r in budgeted]
    span = budgeted[-2]["time"] - budgeted[0]["time"] + cpu[0]
    assert sum(cpu[:-2]) <= 0.1 * span + SLACK_SECONDS
    # The closing lines: the waits the budget made longer, then where the samples went.
    lines = res.stderr.splitlines()
    assert "to keep sampling within --budget 0.1 of the run" in lines[-2], res.stderr
    assert lines[-1].startswith(f"memprobe: {len(rows)} samples of process,walk written")


def test_budget_one_samples_every_interval(tmp_path: Path) -> None:
    """The law above has teeth: without a budget the same samples come far sooner."""
    res, rows = run(tmp_path, "--budget", "1")
    assert max(shortfalls(rows, 0.1)) > 0.0
    assert "--budget" not in res.stderr


@pytest.mark.parametrize("value", ["0", "-0.1", "1.5", "nan", "inf"])
def test_a_budget_outside_0_1_is_refused_before_any_file(tmp_path: Path, value: str) -> None:
    (tmp_path / "p.py").write_text("pass\n")
    res = subprocess.run(
        [sys.executable, "-m", "memprobe", "run", "--budget", value, "-o", "o.jsonl", "p.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.startswith("memprobe: error: --budget: must be a fraction of wall "
                                 "time in (0, 1]"), res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.py"]


@given(seconds=st.floats(1e-6, 10.0), budget=st.floats(1e-3, 1.0),
       interval=st.floats(1e-3, 10.0))
def test_pause_after_bounds_the_share_and_never_shortens_the_interval(
        seconds: float, budget: float, interval: float) -> None:
    sampler = Sampler(None, interval, budget)
    sampler.tried = UNBUDGETED_SAMPLES - 1
    assert sampler.pause_after(seconds) == interval  # a verdict's samples first
    sampler.tried = UNBUDGETED_SAMPLES
    wait = sampler.pause_after(seconds)
    assert wait >= interval
    assert seconds / (seconds + wait) <= budget * (1 + 1e-9)
    # No longer than needed: the interval, or exactly the budget's share.
    assert wait == interval or math.isclose(seconds / (seconds + wait), budget)


@given(seconds=st.floats(1e-6, 10.0), budget=st.floats(1e-3, 0.999),
       interval=st.floats(1e-3, 1e-2), tried=st.integers(1, UNBUDGETED_SAMPLES - 1))
def test_costly_first_samples_are_budgeted_once_their_cpu_time_is_spent(
        seconds: float, budget: float, interval: float, tried: int) -> None:
    """Samples of a second each (tracemalloc with torch imported) do not take the first
    UNBUDGETED_SAMPLES at --interval: past UNBUDGETED_SECONDS of CPU time in samples,
    however few, the budget spaces them."""
    sampler = Sampler(None, interval, budget)
    sampler.tried = tried
    sampler.busy_seconds = UNBUDGETED_SECONDS * (1 - 1e-9)
    assert sampler.pause_after(seconds) == interval
    sampler.busy_seconds = UNBUDGETED_SECONDS
    wait = sampler.pause_after(seconds)
    assert seconds / (seconds + wait) <= budget * (1 + 1e-9)
    assert wait == interval or math.isclose(seconds / (seconds + wait), budget)


def test_no_budget_waits_the_interval() -> None:
    assert Sampler(None, 0.25).pause_after(3.0) == 0.25
    assert 0.0 < DEFAULT_RUN_BUDGET < 1.0
