"""Costs of the native-memory probes and of memray tracking against tracemalloc's.

Run: ``python benchmarks/native_costs.py [--rounds 60] [--rllib --pairs 6 --steps 1000]``.

1. Probe ``sample()`` costs (µs per call): ``malloc``, ``smaps`` with and without
   the rollup, ``process`` for reference, and ``mallinfo2`` on a fragmented heap.
   Rows are timed interleaved (each round times every row once, a batch of
   calls); the figures are the median and the best round.
2. Tracking cost on a workload of function calls and allocations, small and
   4 KiB (``workload()``): untracked against tracemalloc (1 frame), a memray
   window (Python stacks), and a memray window with ``native_traces``.
   Interleaved pairs, medians of the per-pair ratios. Also the cost of opening
   and closing a memray window, and of a ``CulpritCapture`` end to end.
3. ``referrer_chains`` for one instance among 100k and 1M gc-tracked objects.
4. ``--rllib``: PPO CartPole env steps/s with the ``memray`` probe windowed as the
   ``tracemalloc`` probe is in ``rllib_tracing.py`` (same harness and pairs).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interleaved import time_rows

from memprobe.probes.malloc import MallocProbe, malloc_stats, trim_reclaimed_bytes
from memprobe.probes.process import ProcessProbe
from memprobe.probes.smaps import SmapsProbe

WINDOW = {"window_steps": 2, "period_steps": 20}


def _rows_interleaved(rows: dict[str, Callable[[], object]], rounds: int,
                      batch: int) -> dict[str, tuple[float, float]]:
    """``{row: (median µs, best µs)}``, every row timed once per round."""
    times = time_rows(list(rows.items()), rounds, batch)
    return {name: (statistics.median(t), min(t)) for name, t in zip(rows, times)}


def probe_costs(rounds: int) -> None:
    malloc, smaps_full, smaps_counters, process = (
        MallocProbe(), SmapsProbe(), SmapsProbe(rollup=False), ProcessProbe())
    for p in (malloc, smaps_full, smaps_counters, process):
        p.start()
    rows = {
        "process (reference)": process.sample,
        "malloc": malloc.sample,
        "smaps rollup=False": smaps_counters.sample,
        "smaps rollup=True": smaps_full.sample,
    }
    result = _rows_interleaved(rows, rounds, 50)
    # A fragmented heap: 200k small blocks, 1 in 50 kept. mallinfo2 walks the free lists.
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(200 + (i % 7) * 64) for i in range(200_000)]
    kept = [p for i, p in enumerate(blocks) if i % 50 == 0]
    for i, p in enumerate(blocks):
        if i % 50:
            libc.free(p)
    del blocks
    frag = _rows_interleaved({"malloc, fragmented heap": malloc.sample}, rounds, 50)
    held = malloc_stats()["free_bytes"]
    t0 = time.perf_counter()
    reclaimed = trim_reclaimed_bytes()
    trim_ms = (time.perf_counter() - t0) * 1e3
    for p in kept:
        libc.free(p)
    for p in (malloc, smaps_full, smaps_counters, process):
        p.stop()
    print(f"## Probe sample() cost, µs per call ({rounds} interleaved rounds)\n")
    print("| probe | median µs | best µs |")
    print("|---|---:|---:|")
    for name, (med, best) in {**result, **frag}.items():
        print(f"| {name} | {med:.1f} | {best:.1f} |")
    print(f"\nmalloc_trim(0) with {held / 2**20:.0f} MiB free held: {trim_ms:.1f} ms, "
          f"gave back {reclaimed / 2**20:.0f} MiB\n")


def workload(n: int = 20000) -> int:
    """Function calls, small objects and 4 KiB buffers (malloc), as a step of a loop."""
    def step(i: int) -> int:
        d = {"i": i, "x": [i] * 8}
        return len(d["x"]) + len(bytes(4096))

    return sum(step(i) for i in range(n))


def _timed(setup: Callable[[], object], teardown: Callable[[object], None]) -> float:
    state = setup()
    try:
        t0 = time.perf_counter()
        workload()
        return time.perf_counter() - t0
    finally:
        teardown(state)


def tracking_costs(pairs: int) -> None:
    from memprobe.probes.memray import MemrayWindow

    def none_setup() -> None:
        return None

    def none_teardown(_: object) -> None:
        pass

    def tm_setup() -> None:
        tracemalloc.start(1)

    def tm_teardown(_: object) -> None:
        tracemalloc.stop()

    def memray_setup(native: bool) -> Callable[[], MemrayWindow]:
        def setup() -> MemrayWindow:
            w = MemrayWindow(native_traces=native)
            w.open()
            return w
        return setup

    def memray_teardown(w: object) -> None:
        assert isinstance(w, MemrayWindow)
        w.abandon()

    variants: dict[str, tuple[Callable[[], object], Callable[[object], None]]] = {
        "tracemalloc (1 frame)": (tm_setup, tm_teardown),
        "memray window": (memray_setup(False), memray_teardown),
        "memray window, native_traces": (memray_setup(True), memray_teardown),
    }
    workload()  # warm up
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(pairs):
        for name, (setup, teardown) in variants.items():
            base = _timed(none_setup, none_teardown)
            ratios[name].append(_timed(setup, teardown) / base)
    base_ms = statistics.median(_timed(none_setup, none_teardown) for _ in range(5)) * 1e3
    print(f"## Tracking cost on workload() ({base_ms:.1f} ms untracked; {pairs} pairs)\n")
    print("| tracking | slowdown (median of pair ratios) |")
    print("|---|---:|")
    for name, r in ratios.items():
        print(f"| {name} | {statistics.median(r):.2f}x |")

    opens, closes, closes_native = [], [], []
    for _ in range(max(5, pairs // 2)):
        for native, out in ((False, closes), (True, closes_native)):
            w = MemrayWindow(native_traces=native)
            t0 = time.perf_counter()
            w.open()
            t1 = time.perf_counter()
            keep = [bytes(10_000) for _ in range(100)]
            t2 = time.perf_counter()
            w.close()
            t3 = time.perf_counter()
            del keep
            if not native:
                opens.append(t1 - t0)
            out.append(t3 - t2)
    print(f"\nmemray window: open {statistics.median(opens) * 1e3:.1f} ms, close and read "
          f"{statistics.median(closes) * 1e3:.1f} ms (native_traces: "
          f"{statistics.median(closes_native) * 1e3:.1f} ms; the first close in a process "
          f"also symbolizes the loaded libraries)\n")

    from memprobe.capture import capture_culprits

    for native in (False, True):
        t0 = time.perf_counter()
        result = capture_culprits(0.5, workload, native=native)
        total = time.perf_counter() - t0
        print(f"CulpritCapture of 0.5 s (native={native}): {total:.2f} s end to end, "
              f"{len(result.python_sites)} python sites, {len(result.native_sites)} native")


class _Held:
    pass


def referrer_costs() -> None:
    """One chain of depth 3 (instance <- list <- dict <- module global) among N objects."""
    from memprobe.referrers import referrer_chains

    global _HOLDER
    _HOLDER = {"k": [_Held()]}
    print("\n## referrer_chains, one instance held 3 steps below a module global\n")
    print("| live gc-tracked objects | ms |")
    print("|---:|---:|")
    ballast: list[object] = []
    for n in (100_000, 1_000_000):
        ballast.extend([{} for _ in range(n - len(ballast))])
        t0 = time.perf_counter()
        (chain,) = referrer_chains(_Held, samples=1, timeout_seconds=30)
        ms = (time.perf_counter() - t0) * 1e3
        assert chain.complete, chain
        print(f"| {n:,} (+ the interpreter's) | {ms:.0f} |")
    del ballast
    _HOLDER = None


_HOLDER: object = None


def rllib(pairs: int, steps: int) -> None:
    import rllib_overhead as ro
    import rllib_tracing as rt

    from memprobe_rllib import MemoryProbeCallback

    table = rt.variants()
    table["memray_windowed"] = lambda c: c.callbacks(
        MemoryProbeCallback.configure(probes={"process": {}, "gc": {}, "memray": dict(WINDOW)})
    )
    ro.variants = lambda: table  # type: ignore[assignment]
    t0 = time.perf_counter()
    names = ["none_again", "tracemalloc", "windowed", "memray_windowed"]
    result = ro.measure(names, pairs, steps)
    ro.print_table(result, pairs, steps, time.perf_counter() - t0,
                   f"; windowed = memray_windowed = {WINDOW}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rllib", action="store_true", help="also the RLlib steps/s table")
    args = parser.parse_args()
    probe_costs(args.rounds)
    tracking_costs(args.pairs)
    referrer_costs()
    if args.rllib:
        rllib(args.pairs, args.steps)


if __name__ == "__main__":
    main()
