"""The live alarm on a healthy loop of reference cycles: how often it alarms.

Run: ``python benchmarks/alarm_cycles.py [--runs 5] [--cycles 5 20 50] [--steps 3000]``.

Each run is a fresh interpreter running the program of issue 24's report: ``N`` reference
cycles of garbage per step (a list holding a dict that holds it, and a ``json.dumps``
string), full collections rare (``gc.set_threshold(700, 10, 10**9)``, as in a large
heap), one ``gc.collect()`` every 700 steps, under ``Prober(probes={"process": {}, "gc":
{"blocks": True}, "tracemalloc": {}}, on_leak=..., capture_on_leak=False)`` for
``--steps`` samples (the capture is off: it opens only after an alarm, and its native
tracing slows a run past a quarter of an hour on a shared machine). ``--keep`` also keeps
a ``bytearray(512)`` per step: a leak beside the same garbage. It prints each run's alarms
(step, key, kind) and, per number of cycles, the runs that alarmed. With ``PYTHONPATH``
pointing at another checkout's ``src`` it measures that one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

PROGRAM = r"""
import gc, json, sys
import memprobe
gc.set_threshold(700, 10, 10**9)
cycles, steps, keep = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
fired, kept = [], []
i = 0
with memprobe.Prober(probes={"process": {}, "gc": {"blocks": True}, "tracemalloc": {}},
                     on_leak=lambda v: fired.append((i, v)), capture_on_leak=False) as p:
    for i in range(steps):
        for _ in range(cycles):
            a = []; a.append({"a": a, "s": json.dumps({"i": i})})
        if keep:
            kept.append(bytearray(512))
        if i % 700 == 350:
            gc.collect()
        p.sample(step=i)
print(json.dumps([[s, v.metric, v.kind, list(v.culprits[:1])] for s, v in fired]))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cycles", type=int, nargs="+", default=[5, 20, 50])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--keep", action="store_true", help="a leak beside the garbage")
    args = parser.parse_args()
    alarmed = {c: 0 for c in args.cycles}
    for run in range(args.runs):
        for cycles in args.cycles:  # interleaved: the machine's load falls on every case
            out = subprocess.run([sys.executable, "-c", PROGRAM, str(cycles), str(args.steps),
                                  "1" if args.keep else "0"],
                                 capture_output=True, text=True, check=True)
            fired = json.loads(out.stdout.splitlines()[-1])
            alarmed[cycles] += bool(fired)
            print(f"cycles={cycles} run={run + 1}: {fired or 'no alarm'}", flush=True)
    for cycles, n in alarmed.items():
        print(f"{cycles} cycles per step: {n} of {args.runs} runs alarmed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
