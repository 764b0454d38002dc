"""``memprobe run --budget``: sampling takes at most that fraction of the run's wall time.

After a sample of ``d`` seconds the sampler waits at least ``d / budget - d``. The law is
checked from what the run wrote, not from a clock's threshold: each sample's probe time
(``overhead/sample_seconds``) is a lower bound of the sample's own duration, so the time
between two samples' records is at least ``s_i / budget - s_i + s_next``, however loaded
the machine is (load only lengthens the waits).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memprobe.cli._run import DEFAULT_RUN_BUDGET, Sampler

#: Keeps 300,000 gc-tracked objects alive, so that each sample of the ``objects`` probe
#: (a walk of them all) takes milliseconds, and runs long enough for a dozen samples.
PROGRAM = """\
import time
held = [[i] for i in range(300_000)]
end = time.monotonic() + 1.5
while time.monotonic() < end:
    time.sleep(0.005)
"""

#: The clocks the records and the waits use differ (time.time, the monotonic clock):
#: slack for their rates and the records' rounding.
SLACK_SECONDS = 2e-3


def run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    (tmp_path / "p.py").write_text(PROGRAM)
    res = subprocess.run(
        [sys.executable, "-m", "memprobe", "run", "--probes", "process,objects",
         "--interval", "0.001", *args, "-o", "out.jsonl", "p.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    return res, rows


def shortfalls(rows: list[dict], budget: float) -> list[float]:
    """For each pair of successive samples, how much sooner the second came than the
    budget's law allows (positive: the law broken). The exit sample is left out: the
    program's end cuts the wait before it short."""
    out = []
    rows = rows[:-1]
    for a, b in zip(rows, rows[1:]):
        s_a = a["values"]["memprobe/overhead/sample_seconds"]
        s_b = b["values"]["memprobe/overhead/sample_seconds"]
        out.append(s_a / budget - s_a + s_b - (b["time"] - a["time"]))
    return out


def test_each_wait_keeps_sampling_within_the_budget(tmp_path: Path) -> None:
    res, rows = run(tmp_path, "--budget", "0.1")
    assert len(rows) >= 4
    assert max(shortfalls(rows, 0.1)) <= SLACK_SECONDS, shortfalls(rows, 0.1)
    # The samples' own time over the run's (from the first sample's start, its record's
    # time less its probe time, to the last sample before the exit): within the budget.
    probe_seconds = [r["values"]["memprobe/overhead/sample_seconds"] for r in rows]
    span = rows[-2]["time"] - (rows[0]["time"] - probe_seconds[0])
    assert sum(probe_seconds[:-2]) <= 0.1 * span + SLACK_SECONDS
    # The closing lines: the waits the budget made longer, then where the samples went.
    lines = res.stderr.splitlines()
    assert "to keep sampling within --budget 0.1 of the run" in lines[-2], res.stderr
    assert lines[-1].startswith(f"memprobe: {len(rows)} samples of process,objects written")


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
    wait = Sampler(None, interval, budget).pause_after(seconds)
    assert wait >= interval
    assert seconds / (seconds + wait) <= budget * (1 + 1e-9)
    # No longer than needed: the interval, or exactly the budget's share.
    assert wait == interval or math.isclose(seconds / (seconds + wait), budget)


def test_no_budget_waits_the_interval() -> None:
    assert Sampler(None, 0.25).pause_after(3.0) == 0.25
    assert 0.0 < DEFAULT_RUN_BUDGET < 1.0


def test_report_says_the_budget_spaced_too_few_samples(tmp_path: Path) -> None:
    """memprobe run's samples 1 s apart, each taking 0.2 s (the default budget's share):
    the budget spaced them, so the hint says to raise it rather than lower --interval."""
    lines = []
    for i in range(12):
        lines.append(json.dumps({"time": 100.0 + i, "step": i, "pid": 3, "role": "main",
                                 "command": "job.py", "values": {
            "memprobe/process/rss_bytes": 1000 * i, "memprobe/overhead/sample_seconds": 0.2,
            "memprobe/overhead/process_seconds": 0.001, "memprobe/tracemalloc/traced_bytes": 5,
            "memprobe/overhead/tracemalloc_seconds": 0.19}}))
    (tmp_path / "spaced.jsonl").write_text("\n".join(lines) + "\n")
    res = subprocess.run([sys.executable, "-m", "memprobe", "report", "spaced.jsonl"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert ("need 20 samples, got 12 — run longer or raise --budget: a sample took 0.2 s "
            "(tracemalloc 0.19 s) of the 1 s between samples, so a lower --interval adds "
            "few") in res.stdout, res.stdout
