"""What naming the user's frame costs: tracemalloc traced with 1, 4, 8 or 16 frames,
on the field programs of ``field_accuracy.py`` (a json/regex workload, numpy
temporaries, a torch MLP).

Run: ``python benchmarks/culprit_frames.py [--rounds 9] [--batch 20]``.

Each round times ``batch`` steps of each program untraced and traced with each
frame count (tracing started before the batch, stopped after it; interleaved,
see ``interleaved.py``). Printed: the median ms per step, and each traced row
as a multiple of the untraced one and of tracing with one frame.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tracemalloc
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from field_accuracy import PROGRAMS
from interleaved import time_rows

NFRAMES = (0, 1, 4, 8, 16)


def traced(step: Callable[[int], None], nframe: int, batch: int) -> Callable[[], None]:
    def run() -> None:
        if nframe:
            tracemalloc.start(nframe)
        try:
            for i in range(batch):
                step(i)
        finally:
            if nframe:
                tracemalloc.stop()
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--program", nargs="*", default=["json_re", "numpy_temporaries",
                                                      "torch_training"])
    args = ap.parse_args()
    print("| program | frames | ms/step | x untraced | x 1 frame |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.program:
        step = PROGRAMS[name]()
        for i in range(args.batch):  # warm-up: caches, allocator
            step(i)
        rows = [(str(n), traced(step, n, args.batch)) for n in NFRAMES]
        times = time_rows(rows, args.rounds, 1)
        med = [statistics.median(t) / 1e3 / args.batch for t in times]
        for (n, _), m in zip(rows, med):
            label = "untraced" if n == "0" else n
            print(f"| {name} | {label} | {m:.3f} | {m / med[0]:.2f} | "
                  f"{m / med[1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
