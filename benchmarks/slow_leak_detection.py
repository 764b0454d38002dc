"""Detection curve of slow leaks, and false alarms on healthy series (issue 28).

Run: ``python benchmarks/slow_leak_detection.py [--max-samples 40000] [--healthy 100000]``.

**Detection.** Each run is a real process (a fresh interpreter: this file with
``--run``) holding a 500 MiB ballast (touched, so resident) that keeps a
``bytearray`` of ``rate * 500 MiB / 1000`` bytes per sample: leak rates from
0.05% to 10% of the process per 1,000 samples. It samples the process and gc
probes with the live alarm at the Prober's defaults (``history=1000``, a check
every 50 samples) or the RLlib adapter's (``history=200``, every 20), and
prints the sample of the first alarm on ``process/rss_bytes`` (or "-" within
``--max-samples``), the scale the verdict rested on and its slope against the
truth.

**False alarms.** Healthy series of ``--healthy`` samples replayed through a
Prober's alarm (a probe that returns the next value; the adapter's defaults,
and ``leak_check_every`` 2, 5 and 20): a warm-up then flat with allocator
noise, plateaus that step up then stay, a sawtooth cache that fills and
clears, bursty growth that stops (goal: 0 alarms); and a "long ramp" (8 MiB
over the first 200 samples, then flat), which is a leak of 8% per 1,000 samples
until it stops: it alarms, as it did before the tiers (main: at sample 51 with
``leak_check_every=2``, 79 with 20).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)
MIB = 1 << 20
BALLAST_MIB = 500
RATES = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)  # of the process per 1,000 samples
DEFAULTS = {"prober": {"history": 1000, "leak_check_every": 50},
            "adapter": {"history": 200, "leak_check_every": 20}}


def run_one(rate: float, config: str, max_samples: int) -> dict:
    """In this process: the ballast, the leak, the alarm; returns the first alarm."""
    import memprobe

    ballast = [bytearray(MIB) for _ in range(BALLAST_MIB)]
    for b in ballast:
        b[::4096] = b"\1" * len(b[::4096])
    per_sample = int(rate * BALLAST_MIB * MIB / 1000)
    kept = []
    alarms: list = []
    first = None
    t0 = time.perf_counter()
    with memprobe.Prober(["process", "gc"], on_leak=alarms.append,
                         **DEFAULTS[config]) as prober:
        for i in range(max_samples):
            kept.append(bytearray(per_sample))
            prober.sample(step=i)
            if first is None and any(v.metric == "process/rss_bytes" for v in alarms):
                first = i + 1
                break
        v = prober.report().get("process/rss_bytes")
    return {"rate": rate, "config": config, "per_sample": per_sample, "first": first,
            "status": v.status, "slope": v.slope_per_step, "scale": v.span_points,
            "seconds": time.perf_counter() - t0}


def _healthy(kind: str, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    level = 500 * MIB
    out = []
    for i in range(n):
        noise = rng.gauss(0, 30_000) + 262_144 * rng.randrange(3)  # allocator pages
        if kind == "warm-up":
            y = level + 8 * MIB * min(i, 40) / 40
        elif kind == "long ramp":  # 1.6% of the process in 200 samples: a leak until it stops
            y = level + 8 * MIB * min(i, 200) / 200
        elif kind == "plateaus":
            y = level + 2 * MIB * min(i // 5000, 6)  # steps up that stop (after 30,000)
        elif kind == "sawtooth":
            y = level + 4 * MIB * ((i % 400) / 400)
        else:  # bursty growth that stops: bursts of 1 MiB per 100 samples, for 20,000
            y = level + MIB * min(i, 20_000) // 100 / 100 * (1 if (i // 1000) % 2 else 0.5)
        out.append(y + noise)
    return out


class _Replay:
    series: list = []

    def __init__(self) -> None:
        self.i = 0

    def start(self) -> None: ...
    def stop(self) -> None: ...

    def sample(self) -> dict:
        self.i += 1
        return {"rss_bytes": self.series[self.i - 1]}


def false_alarms(kind: str, n: int, check_every: int, seed: int) -> int:
    import memprobe

    class Plugin:
        @memprobe.hookimpl
        def memprobe_register_probes(self, register) -> None:
            register("replay", _Replay)

    _Replay.series = _healthy(kind, n, seed)
    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(Plugin())
    fired: list = []
    with memprobe.Prober(["replay"], plugin_manager=pm, history=200, on_leak=fired.append,
                         leak_check_every=check_every,
                         leak_options={"metrics": ["replay/rss_bytes"]}) as prober:
        for i in range(n):
            prober.sample(step=i)
    return len(fired)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-samples", type=int, default=40_000)
    ap.add_argument("--healthy", type=int, default=100_000)
    ap.add_argument("--run", nargs=2)
    ap.add_argument("--skip-detection", action="store_true")
    args = ap.parse_args()
    if args.run:
        print(json.dumps(run_one(float(args.run[0]), args.run[1], args.max_samples)))
        return
    if not args.skip_detection:
        print("| leak (% of 500 MiB per 1,000 samples) | B/sample | defaults | first alarm "
              "(sample) | verdict | slope (B/sample) | scale (samples) |")
        print("|---|---|---|---|---|---|---|")
        for rate in RATES:
            for config in DEFAULTS:
                out = subprocess.run([sys.executable, HERE, "--run", str(rate), config,
                                      "--max-samples", str(args.max_samples)],
                                     capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"| {100 * rate:g}% | {r['per_sample']:,} | {config} | "
                      f"{r['first'] or '-'} | {r['status']} | {r['slope']:,.0f} | "
                      f"{r['scale']:,} |", flush=True)
    print()
    print(f"| healthy series ({args.healthy:,} samples) | leak_check_every | alarms |")
    print("|---|---|---|")
    for kind in ("warm-up", "plateaus", "sawtooth", "bursty", "long ramp"):
        for every in (2, 5, 20):
            print(f"| {kind} | {every} | {false_alarms(kind, args.healthy, every, 1)} |",
                  flush=True)


if __name__ == "__main__":
    main()
