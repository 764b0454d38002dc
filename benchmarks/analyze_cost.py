"""What judging a series costs, in default samples: is ``memprobe.analyze`` cheap
enough to run live, at every leak check?

Timed interleaved against one default ``Prober.sample()`` (process and gc) in the same
process, as ratios of medians: "one check of 500 points costs N samples". The alarm
judges up to 40 points per scale and the report the whole history, so both sizes are
timed.

    PYTHONPATH=src python benchmarks/analyze_cost.py
"""

from __future__ import annotations

import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from interleaved import time_rows

import memprobe


def series(n: int) -> tuple[list[float], list[float]]:
    rng = random.Random(0)
    xs = [float(x) for x in range(n)]
    return xs, [rng.gauss(0, 1e4) + 50 * x for x in xs]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    prober = memprobe.Prober(probes=["process", "gc"], load_entrypoints=False)
    s40, s500, s1000 = series(40), series(500), series(1000)
    step = iter(range(10**9))
    with prober:
        rows = [
            ("sample (process, gc)", lambda: prober.sample(next(step))),
            ("analyze, 40 points", lambda: memprobe.analyze(*s40)),
            ("analyze, 500 points", lambda: memprobe.analyze(*s500)),
            ("analyze, 1,000 points", lambda: memprobe.analyze(*s1000)),
        ]
        times = time_rows(rows, rounds=rounds, batch=20)
    floor = statistics.median(times[0])
    print(f"{'row':<24} {'median, in samples':>20}")
    for (name, _), ts in zip(rows, times):
        print(f"{name:<24} {statistics.median(ts) / floor:>20.1f}")


if __name__ == "__main__":
    main()
