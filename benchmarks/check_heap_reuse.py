"""A native leak into heap the program freed before, and healthy functions, under
``check_leaks``: what malloc's bytes in use and the resident size read.

Run: ``python benchmarks/check_heap_reuse.py [--rounds 3] [--repeats 40]``.

Each round runs, in a fresh interpreter each, ``memprobe.check_leaks(fn, repeats=N,
probes=["process", "malloc"])`` on:

- ``heap_reuse_leak``: ctypes ``malloc(16 KiB)`` a call, never freed, in a process whose
  heap holds 6 MiB it freed before (the resident size reads levelled off);
- ``noop``, ``json``, ``numpy``, ``list``: functions that keep nothing.

It prints, per case, the median over the rounds of ``malloc/in_use_bytes``' slope per
call, and the statuses of it and of ``process/rss_bytes`` seen in the rounds. With
``PYTHONPATH`` pointing at another checkout's ``src`` it measures that one (the check's
own growth before the Prober's tier feed kept its pending samples in columns).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CASE = r"""
import ctypes, json, sys
import memprobe
name, repeats = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
before = [libc.malloc(16384) for _ in range(400)]
for p in before:
    libc.memset(p, 1, 16384)
for p in before[:-1]:
    libc.free(p)
kept = []
def heap_reuse_leak():
    p = libc.malloc(16384)
    libc.memset(p, 1, 16384)
    kept.append(p)
DOC = json.dumps({"a": list(range(300)), "b": {"c": "x" * 2000}})
def numpy_churn():
    import numpy as np
    return float(np.ones(8192).sum())
fns = {"heap_reuse_leak": heap_reuse_leak, "noop": lambda: None,
       "json": lambda: json.loads(DOC), "numpy": numpy_churn,
       "list": lambda: len([str(i) * 40 for i in range(3000)])}
r = memprobe.check_leaks(fns[name], repeats=repeats, probes=["process", "malloc"])
v, rss = r.get("malloc/in_use_bytes"), r.get("process/rss_bytes")
print(json.dumps({"slope": v.slope_per_step, "status": v.status, "rss": rss.status}))
"""

CASES = ("heap_reuse_leak", "noop", "json", "numpy", "list")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=40)
    args = ap.parse_args()
    got: dict[str, list[dict]] = {c: [] for c in CASES}
    for _ in range(args.rounds):
        for case in CASES:  # interleaved: each round runs every case once
            out = subprocess.run([sys.executable, "-c", CASE, case, str(args.repeats)],
                                 capture_output=True, text=True, check=True).stdout
            got[case].append(json.loads(out.strip().splitlines()[-1]))
    print("| case | in_use_bytes slope per call (median) | in_use_bytes status | rss status |")
    print("|---|---:|---|---|")
    for case, rows in got.items():
        slope = statistics.median(r["slope"] for r in rows)
        print(f"| {case} | {slope:+.0f} B | {', '.join(sorted({r['status'] for r in rows}))} "
              f"| {', '.join(sorted({r['rss'] for r in rows}))} |")


if __name__ == "__main__":
    main()
