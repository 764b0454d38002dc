"""The sampled heap's cost against bare and against its peers, as ratios.

CPU time: each round runs every workload bare and under each tool, in an order that
rotates from round to round (interleaved: the machine's load moves all of them alike);
the figure is the median over rounds of each tool's time over bare's in the same round.

    python benchmarks/heap_cost.py [--rounds 15] [--interval-bytes 524288]

Instructions (``--cachegrind``): each workload runs in a fresh interpreter under
``valgrind --tool=cachegrind``, bare and with the sampler started, and again with no
repetitions of the loop; the figure is (heap - heap at 0 reps) / (bare - bare at 0 reps),
so interpreter start-up and the sampler's own start cancel. The machine's load does not
move instruction counts.

    PYTHONPATH=src python benchmarks/heap_cost.py --cachegrind [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

from memprobe import _heapsample


def churn() -> None:
    for i in range(3000):
        d = {str(j): [j, str(j) * 2] for j in range(20)}
        d.pop("3")


class Point:
    def __init__(self, x: int) -> None:
        self.x, self.y = x, x + 1


def instances() -> None:
    for i in range(60000):
        Point(i)


DOC = {"a": list(range(50)), "b": {"c": "x" * 40, "d": [1.5, 2.5] * 10}}


def json_loop() -> None:
    for _ in range(2000):
        json.loads(json.dumps(DOC))


def regex() -> None:
    pat = re.compile(r"(\w+)@(\w+)\.com")
    text = "mail bob@example.com and alice@test.com now " * 4
    for _ in range(8000):
        pat.findall(text)


def numpy_small() -> None:
    import numpy as np
    for _ in range(8000):
        a = np.arange(16) * 2
        a.sum()


def buffers() -> None:
    for _ in range(400):
        bytes(bytearray(200_000))


WORKLOADS = {"dict/list/str churn": churn, "class instances": instances,
             "json loads/dumps": json_loop, "regex": regex, "small numpy arrays": numpy_small,
             "200 KB buffers": buffers}


def child(mode: str, workload: str, reps: int, interval_bytes: int) -> None:
    """One run measured from outside: ``mode`` is bare or heap."""
    fn = WORKLOADS[workload]
    if mode == "heap":
        _heapsample.start(float(interval_bytes))
    for _ in range(reps):
        fn()


def instructions(mode: str, workload: str, reps: int, interval_bytes: int) -> int:
    out = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         sys.executable, os.path.abspath(__file__), "--child", mode, workload, str(reps),
         "--interval-bytes", str(interval_bytes)],
        capture_output=True, text=True, check=True)
    m = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if not m:
        raise RuntimeError(f"no instruction count from cachegrind: {out.stderr[-500:]}")
    return int(m.group(1).replace(",", ""))


def cachegrind(reps: int, interval_bytes: int, only: list[str]) -> None:
    print(f"interval {interval_bytes} bytes, {reps} repetitions of each loop; "
          "instructions over bare, start-up subtracted")
    print("| workload | heap, instructions |")
    print("|---|---|")
    for w in only or WORKLOADS:
        got = {(m, n): instructions(m, w, n, interval_bytes)
               for m in ("bare", "heap") for n in (0, reps)}
        ratio = ((got["heap", reps] - got["heap", 0]) / (got["bare", reps] - got["bare", 0]))
        print(f"| {w} | {ratio:.3f} |", flush=True)


def timed(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--interval-bytes", type=int, default=512 * 1024)
    ap.add_argument("--cachegrind", action="store_true",
                    help="count instructions under valgrind instead of timing")
    ap.add_argument("--reps", type=int, default=3, help="loop repetitions (--cachegrind)")
    ap.add_argument("--only", action="append", default=[], help="one workload (repeatable)")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "WORKLOAD", "REPS"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]), args.interval_bytes)
        return
    if args.cachegrind:
        cachegrind(args.reps, args.interval_bytes, args.only)
        return
    import memray

    tmp = tempfile.mkdtemp()

    def heap(fn):
        _heapsample.start(float(args.interval_bytes))
        try:
            return timed(fn)
        finally:
            _heapsample.stop()

    def tm(n):
        def run(fn):
            tracemalloc.start(n)
            try:
                return timed(fn)
            finally:
                tracemalloc.stop()
        return run

    def mr(fn):
        path = os.path.join(tmp, f"m{time.monotonic_ns()}.bin")
        with memray.Tracker(path):
            t = timed(fn)
        os.unlink(path)
        return t

    tools = {"bare": timed, "heap": heap, "tracemalloc(1)": tm(1), "tracemalloc(4)": tm(4),
             "memray": mr}
    ratios: dict[str, dict[str, list[float]]] = {w: {t: [] for t in tools if t != "bare"}
                                                 for w in WORKLOADS}
    names = list(tools)
    for r in range(args.rounds):
        for w, fn in WORKLOADS.items():
            fn()  # warm
            order = names[r % len(names):] + names[: r % len(names)]
            got = {t: tools[t](fn) for t in order}
            for t in ratios[w]:
                ratios[w][t].append(got[t] / got["bare"])
    cols = [t for t in names if t != "bare"]
    print(f"interval {args.interval_bytes} bytes, {args.rounds} rounds; "
          "median CPU time over bare")
    print("| workload | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for w in WORKLOADS:
        print(f"| {w} | " + " | ".join(f"{statistics.median(ratios[w][t]):.3f}"
                                       for t in cols) + " |")


if __name__ == "__main__":
    main()
