"""memprobe report reads each process into a bounded digest: its memory does not grow with
the file's length, its verdicts rest on the whole run, runs split over files read as one."""

from __future__ import annotations

import gc
import json
import random
import tracemalloc
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import memprobe
from memprobe.report._digest import PLOT_POINTS, WINDOW_SAMPLES, RunDigest, Thinned
from memprobe.report._runs import load_runs, summarize

RSS = "memprobe/process/rss_bytes"


def _lines(n: int, rate: float, noise: int, seed: int = 0, pid: int = 7) -> list[str]:
    """A process sampled every 2 s: rss growing ``rate`` bytes per sample, with noise
    of up to ``noise`` bytes; a tracemalloc site growing as fast."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        values = {"memprobe/overhead/sample_seconds": 3e-5,
                  RSS: int(3e8 + rate * i + rng.randrange(noise)),
                  "memprobe/process/num_fds": 40 + rng.randrange(2),
                  "memprobe/tracemalloc/filtered_bytes": int(1e7 + rate * i),
                  "memprobe/tracemalloc/overhead_bytes": 100_000,
                  "memprobe/tracemalloc/top/app.py:12/size_bytes": int(1000 + rate * i)}
        out.append(json.dumps({"time": 1.7e9 + 2.0 * i, "step": None, "pid": pid,
                               "role": "job", "values": values}) + "\n")
    return out


def _retained(n: int) -> int:
    """Bytes a digest holds after ``n`` samples (traced by tracemalloc)."""
    samples = [memprobe.Sample(1.7e9 + 2.0 * i, None, 7, {
        "memprobe/overhead/sample_seconds": 3e-5, RSS: 3e8 + 512.0 * i,
        "memprobe/process/num_fds": 40}) for i in range(n)]
    gc.collect()
    tracemalloc.start()
    try:
        digest = RunDigest()
        for s in samples:
            digest.add(s)
        digest.finish()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert digest.count == n
    return held


def test_a_digest_holds_as_much_for_12000_samples_as_for_2000() -> None:
    small, large = _retained(2000), _retained(12_000)
    # Every sample kept would be some 300 bytes each: 3 MiB more for the long run.
    assert large < small * 1.2 + 64 * 1024, (small, large)
    assert large < 2 * 2**20, large


def test_reading_a_file_4_times_longer_takes_no_more_memory(tmp_path: Path) -> None:
    peaks = []
    for n in (300, 1500, 6000):  # the first loads what a report imports on first use
        path = tmp_path / f"run{n}.jsonl"
        path.write_text("".join(_lines(n, 64.0, 4096)))
        gc.collect()
        tracemalloc.start()
        try:
            (run,) = load_runs([str(path)])
            summarize(run)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert run.n_samples == n
    # Kept as samples, 4,500 more lines would take some 4 MiB more at the peak.
    assert peaks[2] < peaks[1] * 1.3 + 256 * 1024, peaks


def test_a_slow_leak_longer_than_the_window_is_judged_over_the_whole_run(
        tmp_path: Path) -> None:
    # 600 B a sample under 1 MiB of noise: nothing over the latest 1,000 samples,
    # 12 MiB over the 20,000 of the run (the coarser tiers).
    path = tmp_path / "slow.jsonl"
    n = 20 * WINDOW_SAMPLES
    path.write_text("".join(_lines(n, 600.0, 2**20)))
    (run,) = load_runs([str(path)])
    summary = summarize(run)
    rss = next(m for m in summary.metrics if m.short == "process/rss_bytes")
    assert rss.leak, rss.verdict
    assert rss.verdict.span_points > WINDOW_SAMPLES
    assert run.n_samples == n and run.span_seconds == 2.0 * (n - 1)
    assert rss.detected_at is not None


def _facts(path_lists: list[list[str]]) -> list[object]:
    out = []
    for paths in path_lists:
        (run,) = load_runs(paths)
        s = summarize(run)
        out.append((run.n_samples, run.span_seconds,
                    [(m.short, m.start, m.end, m.peak, m.verdict, m.detected_at)
                     for m in s.metrics],
                    [(v.key, v.status, v.slope_per_step) for v in s.report.sites],
                    s.suspects))
    return out


def test_a_run_split_over_files_given_newest_first_reads_as_one_file(tmp_path: Path) -> None:
    lines = _lines(3000, 4096.0, 4096)
    whole, old, new, shuffled = (tmp_path / f"{n}.jsonl" for n in ("whole", "a", "b", "s"))
    whole.write_text("".join(lines))
    old.write_text("".join(lines[:1700]))
    new.write_text("".join(lines[1700:]))
    mixed = lines[:]
    random.Random(1).shuffle(mixed)  # out of order within the file: sorted in memory
    shuffled.write_text("".join(mixed))
    one, merged, sorted_ = _facts([[str(whole)], [str(new), str(old)], [str(shuffled)]])
    assert merged == one
    assert sorted_ == one
    assert one[2][0][4].status == "leak"  # type: ignore[index]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 5 * PLOT_POINTS))
def test_thinned_points_are_every_kth_from_the_first(n: int) -> None:
    t = Thinned()
    for i in range(n):
        t.append(float(i), 10.0 + i, 2.0 * i)
    xs = list(t.xs)
    assert len(xs) <= PLOT_POINTS
    if n <= PLOT_POINTS:
        assert xs == [float(i) for i in range(n)] and t.exact
    else:
        stride = xs[1] - xs[0]
        assert xs == [stride * j for j in range(len(xs))]
        assert xs[-1] + stride > n - 1 - stride  # the last points are near the end
        assert len(xs) > PLOT_POINTS // 2
    assert list(t.ys) == [2.0 * x for x in xs] and list(t.ts) == [10.0 + x for x in xs]


def test_the_window_is_the_live_alarms_default_history() -> None:
    import inspect

    default = inspect.signature(memprobe.Prober).parameters["history"].default
    assert WINDOW_SAMPLES == default
