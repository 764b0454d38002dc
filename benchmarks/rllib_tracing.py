"""PPO CartPole-v1 env steps/s: (a) no callback, (b) default probes, (c) tracemalloc
always on, (d) windowed tracing. Builds on ``rllib_overhead.py``.

Run: ``python benchmarks/rllib_tracing.py [--pairs 20] [--steps 1000]``.

Each EnvRunner is a Ray actor in its own process (``rllib_overhead.make_runner``),
so each variant's tracing (tracemalloc is process-wide) is its own and the
baseline's process never traces. Each pair runs every variant against the
baseline in turn (``none_again``, a second runner without a callback, gives the
harness's own error).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rllib_overhead as ro

WINDOW = {"window_steps": 2, "period_steps": 20}


def variants() -> dict[str, ro.Configure]:
    from memprobe_rllib import MemoryProbeCallback

    base = ro.variants()
    base["tracemalloc"] = lambda c: c.callbacks(
        MemoryProbeCallback.configure(probes={"process": {}, "gc": {}, "tracemalloc": {}})
    )
    base["windowed"] = lambda c: c.callbacks(
        MemoryProbeCallback.configure(
            probes={"process": {}, "gc": {}, "tracemalloc": dict(WINDOW)}
        )
    )
    return base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--variants", nargs="*",
                        default=["none_again", "default", "tracemalloc", "windowed"])
    args = parser.parse_args()
    table = variants()
    ro.variants = lambda: table  # type: ignore[assignment]
    t0 = time.perf_counter()
    result = ro.measure(args.variants, args.pairs, args.steps)
    ro.print_table(result, args.pairs, args.steps, time.perf_counter() - t0,
                   f"; windowed = {WINDOW}")


if __name__ == "__main__":
    main()
