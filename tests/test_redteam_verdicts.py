"""Third red-team round: verdicts that passed a leak (repeated steps, a misspelt
metric) and options that failed every test or had no cap (#39)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import memprobe
from memprobe.leak._scales import SAMPLE_ORDER_NOTE, steps_usable


# 11: repeated steps
def test_a_constant_step_in_a_leaking_loop_is_judged_in_sample_order() -> None:
    p = memprobe.Prober(probes=["process"])
    keep = []
    for _ in range(40):
        keep.append(bytearray(2 * 2**20))
        keep[-1][::4096] = b"x" * len(keep[-1][::4096])  # touched: resident
        p.sample(step=0)
    v = p.report().get("process/rss_bytes")
    assert v is not None and v.status == "leak", v
    assert SAMPLE_ORDER_NOTE in v.note and v.step == "sample"
    assert "over the last 40 samples" in v.describe()


@pytest.mark.parametrize("step", [lambda i: 0, lambda i: i % 2, lambda i: 60 - i],
                         ids=["constant", "i%2", "backwards"])
def test_the_cli_judges_unusable_steps_in_sample_order(tmp_path: Path, step) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps({
        "time": 1000.0 + i, "step": step(i), "pid": 7,
        "values": {"memprobe/process/rss_bytes": 1e8 + i * 7.5 * 2**20}}) + "\n"
        for i in range(60)))
    r = subprocess.run([sys.executable, "-m", "memprobe", "report", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "LEAK" in r.stdout and SAMPLE_ORDER_NOTE in r.stdout, r.stdout


def test_analyze_on_repeated_steps_is_never_ok() -> None:
    ys = [1e8 + i * 2**20 for i in range(60)]
    v = memprobe.analyze([0.0] * 60, ys)
    assert v.status == "leak" and SAMPLE_ORDER_NOTE in v.note


def test_steps_repeated_a_few_times_are_still_the_axis() -> None:
    xs = [float(i // 2) for i in range(60)]  # a mark beside each sample
    assert steps_usable(xs, 20)
    v = memprobe.analyze(xs, [1e8 + x * 2**20 for x in xs])
    assert v.status == "leak" and not v.note


@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=80), st.integers(3, 40))
def test_steps_that_go_back_are_never_an_axis(xs: list[float], min_points: int) -> None:
    if any(b < a for a, b in zip(xs, xs[1:])):
        assert not steps_usable(xs, min_points)
    else:
        assert steps_usable(xs, min_points) == (len(set(xs)) >= min(min_points, len(xs)))
