"""The alarm's capture frees what it held when it closes: that must not make the leak
that opened it look levelled off (the capture gives the freed pages back, and the
verdict judges the resident size plus what it gave back)."""

from __future__ import annotations

import pytest

import memprobe
from memprobe._sample import Sample
from memprobe.keys import make_key
from memprobe.report._jsonl import read_samples
from memprobe.leak._series import RELEASED, sample_series

P = "memprobe"
RSS = make_key(P, "process", "rss_bytes")
RELEASED_KEY = make_key(P, *RELEASED.split("/"))
PER_SAMPLE = 40 * 1024  # a leak of 2 KiB per env step, ~20 steps per sample
DROP = 3 * 1024 * 1024  # what the capture gave back as it closed


def _run(n: int, close_at: int, released: float) -> list[Sample]:
    """A leak of PER_SAMPLE per sample, whose resident size falls by DROP at the capture's
    close (sample ``close_at``), its line carrying ``released``; noise of a page."""
    out = []
    for i in range(n):
        rss = 500e6 + PER_SAMPLE * i + 4096 * ((i * 7) % 3) - (DROP if i > close_at else 0)
        out.append(Sample(1000.0 + i, i, 1, {RSS: rss}))
        if i == close_at:
            out.append(Sample(1000.0 + i, i, 1, {make_key(P, "capture", "duration_seconds"): 5.0,
                                                 RELEASED_KEY: released}))
    return out


@pytest.mark.parametrize("close_at", [120, 150, 170])
def test_a_leak_is_judged_leaking_after_the_capture_gave_its_memory_back(close_at):
    """Fails without the add-back: the drop at the close reads as the end of the growth."""
    v = memprobe.analyze_samples(_run(200, close_at, DROP), prefix=P).verdicts[RSS]
    assert v.status == "leak", v
    assert v.slope_per_step == pytest.approx(PER_SAMPLE, rel=0.1)


def test_without_the_released_key_the_drop_is_what_the_series_shows():
    """The control: the same series with nothing released on the capture's line (a
    program that freed memory itself) is not a steady leak."""
    v = memprobe.analyze_samples(_run(200, 150, 0.0), prefix=P).verdicts[RSS]
    assert v.status != "leak", v


def test_a_series_read_in_parts_carries_what_was_released():
    """The live alarm reads its history in parts (Tiers.feed): what a capture released
    is added to every later part, as in one read of the whole."""
    samples = _run(200, 100, DROP)
    whole, _, _ = sample_series(samples, P, lambda k: k == RSS)
    carry = [0.0] * 6
    parts = [sample_series(samples[i:i + 37], P, lambda k: k == RSS, carry)[0][RSS][1]
             for i in range(0, len(samples), 37)]
    assert [y for part in parts for y in part] == list(whole[RSS][1])
    assert carry[3] == DROP
    assert max(whole[RSS][1]) - min(whole[RSS][1]) == pytest.approx(PER_SAMPLE * 199, rel=0.01)


#: A leak of 32 KiB per step by malloc under a Prober with its capture, in a fresh
#: interpreter: in a pytest worker that ran a thousand tests, the heap's free holes (and
#: what the capture freed) serve the leak for a while with the resident size flat, and
#: the verdict depends on those tests. The floor of 0.5% of the resident size is not
#: this test's subject: 16 KiB.
CAPTURE_PROGRAM = """
import json, sys
import memprobe
floors = {"threshold_per_step": 16384, "min_growth_fraction": 0.0}
kept = []
prober = memprobe.Prober(
    probes=["process", "gc"], sink=sys.argv[1], on_leak=lambda v: None,
    leak_check_every=50, load_entrypoints=False, leak_options=floors,
    capture_on_leak={"duration_seconds": 0.3, "holders": False})
closed_at = None
with prober:
    for step in range(6000):
        kept.extend(bytearray(2048) for _ in range(16))
        prober.sample(step)
        if closed_at is None and prober.alarm.culprits is not None:
            closed_at = step
        if closed_at is not None and step >= closed_at + 300:
            break
    v = prober.report(**floors).verdicts["memprobe/process/rss_bytes"]
print(json.dumps({"closed_at": closed_at, "status": v.status, "verdict": v.describe()}))
"""


def test_a_real_capture_gives_back_what_it_freed_and_the_leak_stays_judged_leaking(tmp_path):
    """A Prober on process and gc with its capture: the leak goes on after the capture
    closes; the capture's line says what it gave back, and the resident size is still
    judged leaking at the end, live and from the file."""
    import json
    import subprocess
    import sys

    path = tmp_path / "run.jsonl"
    out = subprocess.run([sys.executable, "-c", CAPTURE_PROGRAM, str(path)],
                         capture_output=True, text=True, timeout=300, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["closed_at"] is not None, "the capture never closed"
    assert got["status"] == "leak", got
    samples = read_samples(str(path))
    lines = [s for s in samples if RELEASED_KEY in s.values]
    assert len(lines) == 1
    released = lines[0].values[RELEASED_KEY]
    # tracemalloc's traces of the blocks made during the capture, its snapshot: freed at
    # its close (48 KiB after a 0.3 s capture in a small process). Whether free() gave
    # them back itself (the heap's top trimmed, 0 left to release) or malloc_trim did
    # depends on the heap's layout: 0 in a process holding a 3 GiB buffer.
    assert released >= 0
    floors = {"threshold_per_step": 16384, "min_growth_fraction": 0.0}
    assert memprobe.analyze_samples(samples, **floors).verdicts[RSS].status == "leak"
