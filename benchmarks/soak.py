"""Soak: a million samples with the default probes must not grow memprobe's own memory.

Run: ``python benchmarks/soak.py`` (3 to 8 minutes here; ``--samples`` to change).
``python benchmarks/soak.py --sink /dev/null``: the same with every sample
encoded (orjson) and written by the JSONL sink.
``python benchmarks/soak.py --rllib 50``: the same question for 50 PPO iterations
with ``MemoryProbeCallback`` (memprobe's traced bytes in the driver at
iterations 10, 20, 40, 50).

Two passes over the same loop, ``Prober()`` (process and gc, ``history=1000``)
sampled ``--samples`` times after ``--warmup`` samples that fill the history
ring buffer:

- untraced: the process's rss (``/proc/self/statm``) after warm-up and every
  tenth of the run; the speed per sample;
- traced: ``tracemalloc`` started by this script with 1 frame; at the same
  points, the live bytes allocated in memprobe's own files
  (``tracemalloc.Filter(True, "<memprobe>/*")``), and all traced bytes.

"total" is measured before the Prober is built and after it stopped (the
history it still holds, 1000 samples, is most of it).

The criterion of issue 7: growth after warm-up under 1 MiB, in both passes.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import memprobe

MIB = 2**20
PAGE = os.sysconf("SC_PAGE_SIZE")
MEMPROBE_DIR = os.path.dirname(os.path.abspath(memprobe.__file__))
LIMIT_BYTES = MIB


def rss_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE


def memprobe_traced_bytes() -> int:
    """Live traced bytes whose allocating frame is in memprobe's files."""
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, os.path.join(MEMPROBE_DIR, "*"))]
    )
    return sum(stat.size for stat in snap.statistics("filename"))


def run(samples: int, warmup: int, measure: Callable[[], dict[str, int]],
        sink: str | None = None) -> dict[str, Any]:
    """Sample ``warmup + samples`` times; ``measure()`` before, after warm-up and 10 times."""
    gc.collect()
    before = measure()
    # The defaults (process and gc, history=1000); entry points off: only memprobe is measured.
    prober = memprobe.Prober(load_entrypoints=False, sink=sink)
    with prober:
        for i in range(warmup):
            prober.sample(step=i)
        gc.collect()
        points = [measure()]
        chunk = samples // 10
        seconds = 0.0
        step = warmup
        for _ in range(10):
            t0 = time.perf_counter()
            for _ in range(chunk):
                prober.sample(step=step)
                step += 1
            seconds += time.perf_counter() - t0
            points.append(measure())
        assert len(prober.history) == prober.history.maxlen
    gc.collect()
    end = measure()  # after stop(): the Prober and its history are still referenced here
    out: dict[str, Any] = {"us_per_sample": seconds / (10 * chunk) * 1e6, "samples": 10 * chunk}
    for key in before:
        first = points[0][key]
        out[key] = {
            "after_warmup": first,
            "growth": end[key] - first,
            "max_growth": max(p[key] for p in points) - first,
            "total": end[key] - before[key],
        }
    del prober
    return out


def rllib_soak(iterations: int) -> int:
    """``--rllib``: PPO on CartPole-v1 with MemoryProbeCallback in the driver process."""
    from ray.rllib.algorithms.ppo import PPOConfig

    import memprobe_rllib
    import ray
    from memprobe_rllib import MemoryProbeCallback

    filters = [tracemalloc.Filter(True, os.path.join(os.path.dirname(os.path.abspath(
        m.__file__)), "*")) for m in (memprobe, memprobe_rllib)]

    def own() -> int:
        gc.collect()
        snap = tracemalloc.take_snapshot().filter_traces(filters)
        return sum(s.size for s in snap.statistics("filename"))

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    config = (
        PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0)
        .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
        .callbacks(MemoryProbeCallback.configure(history=8)).debugging(log_level="ERROR")
    )
    algo = config.build_algo()
    tracemalloc.start(1)
    points: dict[int, int] = {}
    t0 = time.perf_counter()
    try:
        for i in range(1, iterations + 1):
            algo.train()
            if i == 10 or i % 20 == 0 or i == iterations:
                points[i] = own()
    finally:
        seconds = time.perf_counter() - t0
        tracemalloc.stop()
        algo.stop()
        ray.shutdown()
    print(f"PPO CartPole-v1, num_env_runners=0, train_batch_size=128, history=8: "
          f"{iterations} iterations in {seconds:.0f} s under tracemalloc (1 frame)")
    print(f"{'iteration':>10}{'memprobe + memprobe_rllib traced bytes':>42}")
    for i, b in points.items():
        print(f"{i:>10}{b:>42,}")
    growth = points[iterations] - points[10]
    print(f"growth from iteration 10 to {iterations}: {growth:+,} bytes")
    return 0 if growth < 64 * 1024 else 1


def kib(n: float) -> str:
    return f"{n / 1024:+,.1f} KiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=10_000,
                        help="samples before the first measurement (history is 1000)")
    parser.add_argument("--rllib", type=int, metavar="ITERATIONS", default=0,
                        help="instead: this many PPO iterations with MemoryProbeCallback")
    parser.add_argument("--sink", metavar="PATH", default=None,
                        help="write every sample to this JSONL file too (/dev/null: the "
                             "encoder and the write, without filling a disk)")
    args = parser.parse_args(argv)
    if args.rllib:
        return rllib_soak(args.rllib)

    untraced = run(args.samples, args.warmup, lambda: {"rss": rss_bytes()}, args.sink)
    tracemalloc.start(1)
    try:
        traced = run(args.samples, args.warmup, lambda: {
            "own": memprobe_traced_bytes(), "all": tracemalloc.get_traced_memory()[0]},
            args.sink)
    finally:
        tracemalloc.stop()

    sunk = f", sink={args.sink!r}" if args.sink else ""
    print(f"memprobe soak: Prober() (process, gc; history=1000{sunk}), {args.warmup:,} warm-up "
          f"samples, then {untraced['samples']:,} measured; Python {sys.version.split()[0]}")
    print(f"sampling: {untraced['us_per_sample']:.1f} us/sample untraced, "
          f"{traced['us_per_sample']:.1f} us/sample under tracemalloc (1 frame)")
    print(f"{'measure':<34}{'after warm-up':>16}{'growth after':>16}"
          f"{'max growth':>16}{'total (from':>16}")
    print(f"{'':<34}{'':>16}{'warm-up':>16}{'after warm-up':>16}{'no Prober)':>16}")
    failed = False
    rows = [
        ("rss (untraced pass)", untraced["rss"]),
        ("traced, memprobe's files", traced["own"]),
        ("traced, all (for reference)", traced["all"]),
    ]
    for name, r in rows:
        print(f"{name:<34}{r['after_warmup'] / MIB:>12.2f} MiB{kib(r['growth']):>16}"
              f"{kib(r['max_growth']):>16}{kib(r['total']):>16}")
    for name, r in rows[:2]:
        if r["growth"] >= LIMIT_BYTES or r["max_growth"] >= LIMIT_BYTES:
            failed = True
            print(f"FAIL: {name}: grew {kib(r['max_growth'])} after warm-up (limit 1 MiB)")
    print("criterion: growth after warm-up < 1 MiB for rss and for memprobe's files: "
          + ("FAILED" if failed else "met"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
