"""What one sample of the tracemalloc probe costs in a process with numpy or torch
imported (numpy: about 50,000 traced blocks, 4,000-6,000 distinct tracebacks; torch:
about 520,000 and 64,000), against a previous memprobe.

Run: ``python benchmarks/tracemalloc_sample_cost.py --baseline-src DIR [--import torch]
[--rounds 20] [--runs 3]`` where DIR is the ``src`` of the memprobe to compare with, e.g.
made by ``git archive 7e3e6c4 src | tar -x -C /tmp/base`` (DIR ``/tmp/base/src``).

Two parts:

* **In one process**: the probe of ``--baseline-src`` (loaded as package
  ``memprobe_baseline``) and the probe of this checkout each keep sampling the same
  process while tracing runs (``group_by="user"``, 4 frames, as ``memprobe run``
  samples), the module ``--import`` (numpy by default) imported under tracing as a
  program imports it. Each round times one ``sample()`` of each, the raw copy of the
  traces (``_tracemalloc._get_traces()``, the floor of any sample, with the collector
  paused: a copy that set off collections would take work off the next sample) and, with
  ``--first``, a first sample of each (a new probe, with memprobe's caches of file
  names emptied, as in a new process) on this thread's CPU clock
  (``benchmarks/interleaved.py``); the figures are medians over rounds of the per-round
  ratios. The two probes' site statistics are checked equal on the same traces.
  ``--parts`` then times a steady sample of this checkout's probe in its parts. In one
  process the two probes share the collector's state: collections one sets off can
  spare the other's, so ``--processes`` is the figure for a program traced by one.
* **A process per memprobe** (``--processes PAIRS``): the program imports the module
  under tracing, works between samples, and its probe samples ``--samples`` times;
  the medians of its steady samples and its first sample, pair by pair.
* **End to end** (``--runs``): ``memprobe run --probes process,gc,tracemalloc
  --interval 0.02 job.py`` on a program that keeps 200 KB of numpy per step from
  ``helper.py:4`` (500 steps, 10 ms apart), once with each memprobe per pair: the
  samples per second it got, and whether ``memprobe report`` (of the same memprobe)
  then names ``helper.py:4`` among the top suspects.
"""

from __future__ import annotations

import _tracemalloc
import argparse
import importlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

from interleaved import time_rows

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")

JOB = """import time, helper
for step in range(500):
    helper.remember(6_000)  # 48 KB through numpy, kept by helper.py
    time.sleep(0.01)
"""
HELPER = """import numpy as np
KEPT = []
def remember(n):
    KEPT.append(np.ones(n))
"""

KEPT: list = []


def remember(n: int) -> None:
    import numpy as np

    KEPT.append(np.ones(n))


def load_baseline(src: str):
    """The ``memprobe`` package under ``src``, imported as ``memprobe_baseline``."""
    pkg = os.path.join(os.path.abspath(src), "memprobe")
    spec = importlib.util.spec_from_file_location(
        "memprobe_baseline", os.path.join(pkg, "__init__.py"), submodule_search_locations=[pkg])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["memprobe_baseline"] = module
    spec.loader.exec_module(module)
    return module


def forget_file_names(*packages: str) -> None:
    """Empty the caches of file names (shortened, library or not) of each memprobe."""
    for pkg in packages:
        keys = importlib.import_module(f"{pkg}.keys")
        stats = importlib.import_module(f"{pkg}._sitestats")
        for cached in (keys.shorten_path, stats.is_library):
            cached.cache_clear()


def where_the_time_goes(probe, rounds: int) -> None:
    """A steady sample of ``probe`` (this checkout's) in its parts, thread CPU time,
    medians over ``rounds``: the copy of the traces, each trace's site looked up and its
    size put with its site's, each site's totals, freeing the copy, the whole sample."""
    from collections import defaultdict, deque

    from memprobe import _sitestats

    grouper = probe._grouper
    timer = time.thread_time
    parts: dict[str, list[float]] = defaultdict(list)
    for _ in range(rounds):
        with _sitestats.collector_paused():
            t = timer()
            traces = _tracemalloc._get_traces()
            parts["copy of the traces"].append(timer() - t)
            t = timer()
            groups: defaultdict = defaultdict(list)
            deque(map(list.append, map(groups.__getitem__, map(
                grouper._sites.__getitem__, map(_sitestats._third, traces))),
                map(_sitestats._second, traces)), maxlen=0)
            parts["sites looked up, sizes grouped"].append(timer() - t)
            groups.pop(None, None)
            t = timer()
            _sitestats._site_totals(groups, grouper._last)
            parts["each site's totals"].append(timer() - t)
            del groups
            t = timer()
            del traces
            parts["freeing the copy"].append(timer() - t)
        t = timer()
        probe.sample()
        parts["the whole sample()"].append(timer() - t)
    kept = sys.getsizeof(grouper._sites)  # the tracebacks kept, their frames and sites
    seen: set[int] = set()
    for tb, site in grouper._sites.items():
        for obj in (tb, site, *tb, *(x for frame in tb for x in frame)):
            if id(obj) in seen or (isinstance(obj, str) and obj is not site):
                continue
            seen.add(id(obj))
            kept += sys.getsizeof(obj)
    print(f"the probe keeps {len(grouper._sites)} tracebacks' sites in {kept / 1e6:.1f} MB "
          f"(file names aside); tracemalloc's own memory: "
          f"{tracemalloc.get_tracemalloc_memory() / 1e6:.1f} MB")
    copy = statistics.median(parts["copy of the traces"])
    print(f"where a steady sample's time goes, {rounds} rounds, thread CPU time, medians:")
    for name, ts in parts.items():
        med = statistics.median(ts)
        print(f"  {name:<34} {med:.3f} s  {med / copy:.2f} x the copy")


def in_process(baseline_src: str, rounds: int, module: str, first: bool, parts: bool) -> None:
    base = load_baseline(baseline_src)
    from memprobe._sitestats import SiteGrouper, collector_paused
    from memprobe.probes.tracemalloc import TracemallocProbe

    old_mod = importlib.import_module("memprobe_baseline.probes.tracemalloc")
    old_stats = importlib.import_module("memprobe_baseline._sitestats")
    here_dir = os.path.join(SRC, "memprobe", "*")
    base_dir = os.path.join(os.path.dirname(base.__file__), "*")
    # Each leaves the other's allocations out, as it does its own.
    new = TracemallocProbe(exclude=[base_dir])
    old = old_mod.TracemallocProbe(exclude=[here_dir])
    new.start()
    old.start()

    def copy_alone() -> int:
        # The collector paused, as this checkout's sample copies: with it on, the
        # collections the copy sets off would be paid here in place of the next sample.
        with collector_paused():
            return len(_tracemalloc._get_traces())

    def first_sample(make) -> None:
        forget_file_names("memprobe", "memprobe_baseline")
        probe = make()
        probe.start()
        probe.sample()
        probe.stop()  # the other probes keep tracing on

    try:
        importlib.import_module(module)  # its import-time blocks: tens or hundreds of thousands
        if module != "numpy":
            importlib.import_module("numpy")
        for _ in range(50):
            remember(6_000)
        for _ in range(3):  # both probes in their steady state
            old.sample()
            new.sample()
        traces = _tracemalloc._get_traces()
        distinct = len({t[2] for t in traces})
        n_traces = len(traces)
        # Equal where they can be: each takes only its own package's frames for memprobe's.
        dirs = (here_dir[:-1], base_dir[:-1])
        traces = [t for t in traces if not any(f.startswith(dirs) for f, _ in t[2])]
        same = (old_stats.stats_from_traces(traces, "user", old._filters)
                == SiteGrouper("user", new._filters).stats(traces))
        del traces
        rows = [
            ("before: sample()", old.sample),
            ("now: sample()", new.sample),
            ("raw copy of the traces", copy_alone),
            ("the program's step", lambda: remember(6_000)),
        ]
        if first:
            rows += [
                ("before: first sample", lambda: first_sample(
                    lambda: old_mod.TracemallocProbe(exclude=[here_dir]))),
                ("now: first sample", lambda: first_sample(
                    lambda: TracemallocProbe(exclude=[base_dir]))),
            ]
        times = time_rows(rows, rounds, 1, timer=time.thread_time)
        sites = len(new._previous or {})
        if parts:
            where_the_time_goes(new, rounds)
    finally:
        old.stop()
        new.stop()
    before, now, raw = times[0], times[1], times[2]
    print(f"import {module} under tracing: {n_traces} traced blocks, {distinct} distinct "
          f"tracebacks, {sites} sites; nframe {new.nframe}, group_by=user; the two "
          f"probes' site statistics equal: {same}")
    print(f"{rounds} rounds, thread CPU time, medians of the per-round ratios:")
    print(f"  now / before        {statistics.median(n / b for n, b in zip(now, before)):.3f}")
    print(f"  before / raw copy   {statistics.median(b / r for b, r in zip(before, raw)):.2f}")
    print(f"  now / raw copy      {statistics.median(n / r for n, r in zip(now, raw)):.2f}")
    if first:
        fb, fn = times[4], times[5]
        print(f"  first sample, now / before  "
              f"{statistics.median(n / b for n, b in zip(fn, fb)):.3f}")
        print(f"  first sample now / raw copy "
              f"{statistics.median(n / r for n, r in zip(fn, raw)):.2f}")
    print("  CPU seconds (medians; the machine's load inflates them): " + ", ".join(
        f"{name} {statistics.median(t) / 1e6:.3f}" for (name, _), t in zip(rows, times)))


def child(module: str, samples: int) -> None:
    """In a process of its own (``--child``): the memprobe on ``PYTHONPATH`` traces as
    ``memprobe run`` does, the program imports ``module`` and works between samples;
    prints the CPU seconds of its first sample and of the next ``samples``."""
    from memprobe.probes.tracemalloc import TracemallocProbe

    probe = TracemallocProbe()
    probe.start()
    importlib.import_module(module)
    times = []
    for _ in range(samples + 1):
        for _ in range(20):  # the program's work between samples
            remember(6_000)
        t = time.thread_time()
        probe.sample()
        times.append(time.thread_time() - t)
    blocks = len(_tracemalloc._get_traces())
    probe.stop()
    print(json.dumps({"first": times[0], "steady": times[1:], "blocks": blocks}))


def in_processes(baseline_src: str, module: str, pairs: int, samples: int) -> None:
    """``pairs`` pairs of processes, one per memprobe, in alternating order: the ratio of
    each pair's median steady sample and of its first sample."""
    results: dict[str, list[dict]] = {"before": [], "now": []}
    for i in range(pairs):
        order = [("before", baseline_src), ("now", SRC)]
        for label, src in order if i % 2 == 0 else order[::-1]:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--child", module,
                 "--samples", str(samples)],
                env=env, check=True, capture_output=True, text=True)
            results[label].append(json.loads(out.stdout.splitlines()[-1]))
    steady = [statistics.median(n["steady"]) / statistics.median(b["steady"])
              for b, n in zip(results["before"], results["now"])]
    first = [n["first"] / b["first"] for b, n in zip(results["before"], results["now"])]
    print(f"import {module} under tracing, a process per memprobe, {pairs} pairs, "
          f"{samples} steady samples each, thread CPU time:")
    for label, rs in results.items():
        print(f"  {label:>6}: traced blocks " + ", ".join(str(r["blocks"]) for r in rs)
              + "; first sample s " + ", ".join(f"{r['first']:.2f}" for r in rs)
              + "; steady sample s (median) "
              + ", ".join(f"{statistics.median(r['steady']):.2f}" for r in rs))
    print(f"  steady sample now / before, per pair: {', '.join(f'{r:.2f}' for r in steady)}; "
          f"median {statistics.median(steady):.2f}")
    print(f"  first sample now / before, per pair:  {', '.join(f'{r:.2f}' for r in first)}; "
          f"median {statistics.median(first):.2f}")


def one_run(src: str, workdir: str, out: str) -> tuple[float, int, float, bool, str]:
    """samples/s, samples, the tracemalloc probe's median seconds, whether the report
    names helper.py:4 among the top suspects, and its first hint."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, workdir]))
    subprocess.run([sys.executable, "-m", "memprobe", "run", "--probes", "process,gc,tracemalloc",
                    "--interval", "0.02", "-o", out, "job.py"],
                   cwd=workdir, env=env, check=True, capture_output=True)
    rows = [json.loads(line) for line in open(out)]
    times = [r["time"] for r in rows]
    cost = statistics.median(r["values"].get("memprobe/overhead/tracemalloc_seconds", 0.0)
                             for r in rows[1:])
    rate = (len(rows) - 1) / (times[-1] - times[0])
    rep = subprocess.run([sys.executable, "-m", "memprobe", "report", "--json", out],
                         cwd=workdir, env=env, check=True, capture_output=True, text=True)
    proc = json.loads(rep.stdout)["processes"][0]
    named = proc["suspects_title"] == "top suspects" and any(
        s["site"].startswith("helper.py:4") for s in proc["suspects"])
    return rate, len(rows), cost, named, (proc["hints"] or [""])[0]


def end_to_end(baseline_src: str, runs: int) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        for name, text in (("job.py", JOB), ("helper.py", HELPER)):
            with open(os.path.join(workdir, name), "w") as f:
                f.write(text)
        results: dict[str, list[tuple[float, int, float, bool, str]]] = {"before": [], "now": []}
        for i in range(runs):
            order = [("before", baseline_src), ("now", SRC)]
            for label, src in order if i % 2 == 0 else order[::-1]:
                out = os.path.join(workdir, f"{label}.jsonl")
                results[label].append(one_run(os.path.abspath(src), workdir, out))
    print(f"memprobe run --probes process,gc,tracemalloc --interval 0.02 job.py, {runs} pairs:")
    for label, rs in results.items():
        print(f"  {label:>6}: samples/s " + ", ".join(f"{r[0]:.1f}" for r in rs)
              + "; samples " + ", ".join(str(r[1]) for r in rs)
              + "; tracemalloc s/sample " + ", ".join(f"{r[2]:.3f}" for r in rs)
              + "; helper.py:4 a top suspect: " + ", ".join("yes" if r[3] else "no" for r in rs))
        for r in rs:
            if r[4]:
                print(f"          hint: {r[4]}")
    ratios = [n[0] / b[0] for b, n in zip(results["before"], results["now"])]
    print(f"  samples/s now / before, median of the pairs: {statistics.median(ratios):.2f}")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # in_processes' own: --child MODULE --samples N
        child(sys.argv[2], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", required=True, metavar="DIR",
                        help="the src directory of the memprobe to compare with")
    parser.add_argument("--rounds", type=int, default=20, help="in-process rounds (0: none)")
    parser.add_argument("--import", dest="module", default="numpy", metavar="MODULE",
                        help="the module the program imports while tracing (numpy, torch)")
    parser.add_argument("--parts", action="store_true",
                        help="where a steady sample's time goes, in its parts")
    parser.add_argument("--first", action="store_true",
                        help="time first samples too (a new probe, no cached file names)")
    parser.add_argument("--runs", type=int, default=3, help="end-to-end pairs (0: none)")
    parser.add_argument("--processes", type=int, default=0, metavar="PAIRS",
                        help="pairs of processes, one per memprobe (after the in-process part)")
    parser.add_argument("--samples", type=int, default=6,
                        help="steady samples per process with --processes")
    args = parser.parse_args()
    if not os.path.isdir(os.path.join(args.baseline_src, "memprobe")):
        parser.error(f"--baseline-src {args.baseline_src}: no memprobe package in it")
    if tracemalloc.is_tracing():
        parser.error("tracemalloc already traces: the probes would not start it themselves")
    if args.rounds:
        in_process(args.baseline_src, args.rounds, args.module, args.first, args.parts)
    if args.processes:
        in_processes(args.baseline_src, args.module, args.processes, args.samples)
    if args.runs:
        end_to_end(args.baseline_src, args.runs)


if __name__ == "__main__":
    main()
