"""What leaving memprobe's own objects out of a count by type costs (memprobe._own).

The objects probe and the alarm's capture count live objects by type less those
memprobe holds (a Prober's history, its alarm's tiers, the probes' state), found by a
walk from memprobe's roots. Timed interleaved against the plain count of the same heap
(``Counter(map(type, gc.get_objects()))``), as ratios of medians.

    PYTHONPATH=src python benchmarks/own_objects.py
"""

from __future__ import annotations

import gc
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from interleaved import time_rows

import memprobe
from memprobe._own import own_objects, own_type_counts


def plain() -> Counter[type]:
    objs = gc.get_objects()
    try:
        return Counter(map(type, objs))
    finally:
        del objs


def main() -> None:
    heap = [{"i": i, "v": [i]} for i in range(150_000)]  # a user's heap of 300k objects
    prober = memprobe.Prober(probes=["process", "gc"], on_leak=lambda v: None,
                             leak_check_every=10, load_entrypoints=False)
    with prober:
        for step in range(2000):  # a full history and an alarm's tiers
            prober.sample(step)
    own = own_objects()
    n_own = len(own)
    own.clear()
    rows = [("plain count", plain), ("count less memprobe's own", own_type_counts),
            ("walk of memprobe's own alone", lambda: own_objects().clear())]
    times = time_rows(rows, rounds=15, batch=3)
    base = statistics.median(times[0])
    print(f"heap: {len(gc.get_objects())} gc-tracked objects, memprobe's own: {n_own}")
    for (name, _), t in zip(rows, times):
        print(f"  {name:30s} {statistics.median(t) / base:5.2f} x the plain count")
    del heap


if __name__ == "__main__":
    main()
