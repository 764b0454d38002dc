"""PPO CartPole-v1 env steps/s: (a) no callback, (b) default probes, (c) tracemalloc
always on, (d) windowed tracing. Builds on ``rllib_overhead.py``.

Run: ``python benchmarks/rllib_tracing.py [--pairs 20] [--steps 1000]``.

The EnvRunners are local (in this process), and tracemalloc is process-wide,
so tracing is stopped after every run and restarted before the next run of
the runner whose probes had it on (a paused window resumes): each variant
pays its own tracing cost, the baseline none. Variants are measured one at
a time against their own interleaved baseline.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from typing import Any

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


_orig_sps = ro.steps_per_second
_wants: dict[int, int] = {}  # runner id -> nframe its probes were tracing with (0: none)


def steps_per_second(runner: Any, steps: int) -> float:
    """Each runner runs with the tracing state its own probes left, nobody else's."""
    nframe = _wants.get(id(runner), 0)
    if nframe:
        tracemalloc.start(nframe)
    try:
        return _orig_sps(runner, steps)
    finally:
        if tracemalloc.is_tracing():
            _wants[id(runner)] = tracemalloc.get_traceback_limit()
            tracemalloc.stop()
        else:
            _wants[id(runner)] = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--variants", nargs="*", default=["default", "tracemalloc", "windowed"])
    args = parser.parse_args()
    table = variants()
    ro.variants = lambda: table  # type: ignore[assignment]
    ro.steps_per_second = steps_per_second  # type: ignore[assignment]
    t0 = time.perf_counter()
    result: dict[str, float] = {}
    for name in args.variants:  # one variant at a time: tracemalloc is process-wide
        result.update(ro.measure([name], args.pairs, args.steps))
    ro.print_table(result, args.pairs, args.steps, time.perf_counter() - t0,
                   f"; windowed = {WINDOW}")


if __name__ == "__main__":
    main()
