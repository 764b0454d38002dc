"""What the README's first example costs per step: the loop with the Prober against the
same loop without it, interleaved rounds, medians.

Run: ``python benchmarks/readme_example.py [--rounds 7]``. The work of a step is
building and dropping 100 small objects (allocation-heavy, so tracemalloc's
tracing, which slows every allocation, shows). The figures go in README.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import memprobe

STEPS = 5000
#: As in the README: tracemalloc traces 10 steps in every 1000.
PROBES = {"process": {}, "gc": {}, "tracemalloc": {"window_steps": 10, "period_steps": 1000}}


def work() -> None:
    held = [bytearray(100) for _ in range(100)]
    del held


def plain() -> float:
    t = time.perf_counter()
    for _ in range(STEPS):
        work()
    return (time.perf_counter() - t) / STEPS * 1e6


def probed() -> float:
    with memprobe.Prober(probes=PROBES) as prober:
        t = time.perf_counter()
        for step in range(STEPS):
            work()
            prober.sample(step=step)
        return (time.perf_counter() - t) / STEPS * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    probed()  # imports, plugin manager, first tracing
    base, with_probes = [], []
    for _ in range(args.rounds):
        base.append(plain())
        with_probes.append(probed())
    b, p = statistics.median(base), statistics.median(with_probes)
    print(f"a step without memprobe: {b:.1f} µs; with the README's Prober: {p:.1f} µs; "
          f"memprobe adds {p - b:.1f} µs per step ({p / b:.2f}x), median of {args.rounds} "
          f"interleaved rounds of {STEPS} steps")


if __name__ == "__main__":
    main()
