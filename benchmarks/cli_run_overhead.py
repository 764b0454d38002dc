"""What ``memprobe run`` costs a program, as whole commands: tracemalloc's own tracing
apart from memprobe's sampling, with and without the sampling budget (``--budget``).

Run: ``python benchmarks/cli_run_overhead.py [--rounds 5] [--only NAME,...]``.

The program is what a new user writes: ``job.py`` calls ``helper.remember(6_000)`` 500
times 10 ms apart; ``helper.py:4`` keeps ``np.ones(n)`` (48 KB) in a module list, and each
call does some numpy work besides. Alone it runs about 5.5 s, mostly asleep.

Each round runs every command once, in an order rotated from round to round, so that
the machine's drift touches every row alike (``benchmarks/interleaved.py``); a row's
figure is the median over rounds of its wall time over the bare program's in the same
round. Beside it, the CPU seconds of the whole process (user + sys, from
``getrusage(RUSAGE_CHILDREN)``), and for ``memprobe run`` the samples written, the
median seconds the tracemalloc probe took per sample (``overhead/tracemalloc_seconds``)
and what ``memprobe report`` names: ``suspect`` (``helper.py:4`` the first of the top
suspects, a leak verdict on its site), ``largest`` (first of the largest allocation
sites, too few samples for a verdict on it), or ``-``.

Rows:

* ``bare``: ``python job.py``.
* ``traced1``, ``traced4``: ``PYTHONTRACEMALLOC=1`` / ``=4``: tracemalloc tracing from
  the interpreter's start with 1 or 4 frames (the tracemalloc probe's default with
  ``group_by="user"``), no sampling: tracing's own cost, paid on every allocation.
* ``pg``: ``memprobe run --probes process,gc`` (no tracemalloc).
* ``tm``, ``tm.02``: ``--probes process,gc,tracemalloc`` at the default ``--interval``
  and at ``--interval 0.02``, under the default budget.
* ``tm/nb``, ``tm.02/nb``: the same with ``--budget 1`` (only ``--interval`` spaces the
  samples: ``memprobe run`` before the budget).

``--parts`` adds where the time goes, as ratios of CPU times (medians over interleaved
rounds): in one process tracing with 4 frames after ``import numpy`` and 300 of the
program's calls, one ``sample()`` of the tracemalloc probe against the raw copy of the
traces it starts with (``_tracemalloc._get_traces()``), and the program's call traced
against untraced; and as whole commands, ``python -c "import numpy"`` with
``PYTHONTRACEMALLOC=4`` against without (tracing's cost on an import's allocations).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")

JOB = """import time
import helper
for step in range(500):
    helper.remember(6_000)
    time.sleep(0.01)
"""
HELPER = """import numpy as np
KEPT = []
def remember(n):
    KEPT.append(np.ones(n))  # helper.py:4: 48 KB kept per call, made by numpy
    x = np.random.default_rng(len(KEPT)).random(n)  # some numpy work per call
    return float(np.sort(x * 2.0 + 1.0).sum())
"""
CULPRIT = "helper.py:4 → numpy/_core/numeric.py:232"

TM = ["--probes", "process,gc,tracemalloc"]
ROWS: dict[str, tuple[dict[str, str], list[str]]] = {
    "bare": ({}, []),
    "traced1": ({"PYTHONTRACEMALLOC": "1"}, []),
    "traced4": ({"PYTHONTRACEMALLOC": "4"}, []),
    "pg": ({}, ["--probes", "process,gc"]),
    "tm": ({}, TM),
    "tm.02": ({}, [*TM, "--interval", "0.02"]),
    "tm/nb": ({}, [*TM, "--budget", "1"]),
    "tm.02/nb": ({}, [*TM, "--interval", "0.02", "--budget", "1"]),
}


def run_row(name: str, workdir: str, env: dict[str, str]) -> dict[str, object]:
    """One run of the row: wall and CPU seconds, and for memprobe run what it wrote."""
    extra_env, run_args = ROWS[name]
    out = os.path.join(workdir, f"{name.replace('/', '_')}.jsonl")
    cmd = [sys.executable, "job.py"] if name == "bare" or not run_args else [
        sys.executable, "-m", "memprobe", "run", *run_args, "-o", out, "job.py"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=workdir, env={**env, **extra_env}, check=True,
                   capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    res: dict[str, object] = {"wall": wall, "cpu": cpu}
    if not run_args:
        return res
    rows = [json.loads(line) for line in open(out)]
    res["samples"] = len(rows)
    costs = [r["values"]["memprobe/overhead/tracemalloc_seconds"] for r in rows[1:]
             if "memprobe/overhead/tracemalloc_seconds" in r["values"]]
    res["tm_s"] = statistics.median(costs) if costs else None
    rep = subprocess.run([sys.executable, "-m", "memprobe", "report", "--json", out],
                         cwd=workdir, env=env, check=True, capture_output=True, text=True)
    proc = json.loads(rep.stdout)["processes"][0]
    first = proc["suspects"][0]["site"] if proc["suspects"] else ""
    res["named"] = "-" if not first.startswith(CULPRIT) else (
        "suspect" if proc["suspects_title"] == "top suspects" else "largest")
    return res


def parts(rounds: int, env: dict[str, str], workdir: str) -> None:
    """Where the time goes: see the module's docstring (``--parts``)."""
    code = f"""
import sys, time, statistics, _tracemalloc
sys.path[:0] = [{SRC!r}, {HERE!r}]
from interleaved import time_rows
from memprobe.probes.tracemalloc import TracemallocProbe
p = TracemallocProbe()
p.start()
import numpy, helper
for _ in range(300):
    helper.remember(6_000)
p.sample(); p.sample()  # the probe's sites known, as in a run's steady state
rows = [("sample", p.sample), ("copy", lambda: len(_tracemalloc._get_traces())),
        ("step", lambda: helper.remember(6_000))]
traced = len(_tracemalloc._get_traces())
t = time_rows(rows, {rounds} * 4, 1, timer=time.thread_time)
p.stop()
u = time_rows([("step", lambda: helper.remember(6_000))], {rounds} * 4, 20,
              timer=time.thread_time)[0]
med = statistics.median
print(f"traced blocks {{traced}}; thread CPU, medians of {{len(t[0])}} rounds:")
print(f"  a sample / the raw copy of the traces   {{med(a / b for a, b in zip(t[0], t[1])):.2f}}")
print(f"  a sample, ms of CPU                      {{med(t[0]) / 1e3:.0f}}")
print(f"  the program's call traced / untraced    {{med(t[2]) / med(u):.2f}}")
"""
    subprocess.run([sys.executable, "-c", code], cwd=workdir, env=env, check=True)
    ratios = []
    for _ in range(rounds):
        cpu = []
        for extra in ({}, {"PYTHONTRACEMALLOC": "4"}):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable, "-c", "import numpy"], env={**env, **extra},
                           check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        ratios.append(cpu[1] / cpu[0])
    print(f"  python -c 'import numpy', CPU traced (4 frames) / untraced, median of "
          f"{rounds}: {statistics.median(ratios):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated rows (bare is always run)")
    parser.add_argument("--parts", action="store_true", help="also where the time goes")
    args = parser.parse_args()
    names = list(ROWS) if not args.only else ["bare"] + [
        n for n in args.only.split(",") if n in ROWS and n != "bare"]
    results: dict[str, list[dict[str, object]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as workdir:
        for fname, text in (("job.py", JOB), ("helper.py", HELPER)):
            with open(os.path.join(workdir, fname), "w") as f:
                f.write(text)
        env = dict(os.environ)
        env.pop("PYTHONTRACEMALLOC", None)
        env["PYTHONPATH"] = os.pathsep.join([SRC, workdir])
        for r in range(args.rounds):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                results[name].append(run_row(name, workdir, env))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        if args.parts:
            parts(args.rounds, env, workdir)
    bare = results["bare"]
    print(f"{sys.executable} {' '.join(sys.argv)}: {args.rounds} rounds, rotated order; "
          "medians over rounds of per-round ratios to the bare program")
    print(f"{'row':<10} {'wall/bare':>9} {'cpu/bare':>9} {'wall s':>7} {'samples':>8} "
          f"{'tm s/sample':>11}  named")
    for name in names:
        rs = results[name]
        wall = statistics.median(x["wall"] / b["wall"] for x, b in zip(rs, bare))  # type: ignore[operator]
        cpu = statistics.median(x["cpu"] / b["cpu"] for x, b in zip(rs, bare))  # type: ignore[operator]
        wall_s = statistics.median(x["wall"] for x in rs)  # type: ignore[type-var]
        samples = "" if "samples" not in rs[0] else str(
            statistics.median(x["samples"] for x in rs))  # type: ignore[type-var]
        tms = [x["tm_s"] for x in rs if x.get("tm_s") is not None]
        tm_s = f"{statistics.median(tms):.3f}" if tms else ""  # type: ignore[type-var]
        named = ",".join(str(x["named"]) for x in rs) if "named" in rs[0] else ""
        print(f"{name:<10} {wall:>9.2f} {cpu:>9.2f} {wall_s:>7.2f} {samples:>8} {tm_s:>11}  "
              f"{named}")


if __name__ == "__main__":
    main()
