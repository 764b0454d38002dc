"""`memprobe report` on the JSONL of a healthy job: a warm-up that fills a bounded
cache, then a plateau with churn and the allocator's slow creep, is not a leak; the
same loop whose cache never stops growing is. The report, ``prober.report()`` and
the live alarm judge with the same defaults (issue 14)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import memprobe
from memprobe.report._runs import ProcessRun, load_runs, summarize

#: A real Prober around a loop: ``BOUND`` entries of 64 KiB fill a cache during the
#: first 40 steps, then the loop only churns (json, temporaries); ``BOUND`` None
#: keeps adding to the cache at every step (a leak of 64 KiB a step).
JOB = textwrap.dedent(
    """\
    import json, sys
    import memprobe

    path, bound = sys.argv[1], sys.argv[2]
    bound = None if bound == "none" else int(bound)
    cache = {}
    sink = memprobe.JsonlSink(path, tags={"role": "job"})
    with memprobe.Prober(["process", "gc"], sink=sink, load_entrypoints=False) as prober:
        for step in range(300):
            if bound is None or len(cache) < bound:
                cache[step] = bytearray(b"x" * (64 * 1024))
            doc = json.dumps({"step": step, "xs": list(range(200))})
            json.loads(doc)
            tmp = [bytes(512) for _ in range(50)]
            del tmp
            prober.sample(step=step)
        live = prober.report()
    rss = live.verdicts["memprobe/process/rss_bytes"]
    print(rss.status)
    """
)


def _job(tmp_path: Path, bound: str) -> tuple[Path, str]:
    path = tmp_path / f"job-{bound}.jsonl"
    res = subprocess.run([sys.executable, "-c", JOB, str(path), bound], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return path, res.stdout.strip()


def _report(path: Path) -> str:
    res = subprocess.run([sys.executable, "-m", "memprobe", "report", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_healthy_warmup_then_plateau_is_not_a_leak(tmp_path: Path) -> None:
    path, live = _job(tmp_path, "40")
    out = _report(path)
    assert "LEAK" not in out, out
    assert "0 leaking metric(s)" in out, out
    assert live != "leak"
    (run,) = load_runs([str(path)])
    assert len(run.samples) == 300
    assert not memprobe.analyze_samples(run.samples).leaks


def test_the_same_loop_leaking_is_a_leak(tmp_path: Path) -> None:
    path, live = _job(tmp_path, "none")
    out = _report(path)
    assert "LEAK" in out, out
    assert live == "leak"
    (run,) = load_runs([str(path)])
    rss = next(m for m in summarize(run).metrics if m.short == "process/rss_bytes")
    assert rss.leak and rss.growth > 10 * 2**20


@pytest.mark.parametrize("n_samples, words", [
    (12, "need 20 samples, got 12 — run longer"),
    (30, "need 40 samples to tell a leak from a warm-up, got 30"),
    (263, "tracemalloc/traced_bytes has 14 of the 263 samples (its probe ran less often)"),
])
def test_the_too_few_samples_hint_says_what_is_short(n_samples: int, words: str) -> None:
    # rss grows by 1 MiB a sample; with 263 samples, rss is judged (a leak) and
    # tracemalloc, sampled every 20th sample, has too few points of its own.
    samples = []
    for i in range(n_samples):
        values = {"memprobe/overhead/sample_seconds": 1e-5}
        if n_samples < 263:
            values["memprobe/process/rss_bytes"] = 1e8 + 2**20 * i
        elif i % 20 == 0:
            values["memprobe/tracemalloc/traced_bytes"] = 1e6 + 2**20 * i
        samples.append(memprobe.Sample(1000.0 + i, i, 7, values))
    summary = summarize(ProcessRun(7, {}, ["job.jsonl"], samples, "memprobe"))
    assert any(m.verdict is not None and m.verdict.status == "insufficient"
               for m in summary.metrics), summary.metrics
    assert any(words in h for h in summary.hints), summary.hints
    assert not any(f"got {n_samples}" in h for h in summary.hints if n_samples == 263)
