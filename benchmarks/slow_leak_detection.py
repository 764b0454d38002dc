"""Detection curve of slow leaks, and false alarms on healthy series (issue 28).

Run: ``python benchmarks/slow_leak_detection.py [--max-samples 40000] [--healthy 100000]``
(``--skip-detection``, ``--skip-healthy``: one of the two tables).

**Detection.** Each run is a real process (a fresh interpreter: this file with
``--run``) holding a 500 MiB ballast (touched, so resident) that keeps a
``bytearray`` of ``rate * 500 MiB / 1000`` bytes per sample: leak rates from
0.05% to 10% of the process per 1,000 samples. It samples the process and gc
probes with the live alarm at the Prober's defaults (``history=1000``, a check
every 50 samples) or the RLlib adapter's (``history=200``, every 20), and
prints the sample of the first alarm on ``process/rss_bytes`` (or "-" within
``--max-samples``), the scale the verdict rested on and its slope against the
truth.

**False alarms.** Healthy series of ``--healthy`` samples (``tests/series_shapes.py``)
replayed through a Prober's alarm as the process's resident size (a probe standing in
for the process probe, so the series is judged with the process's floors; the
adapter's history of 200, and ``leak_check_every`` 2, 5 and 20): a warm-up then flat
with allocator noise, plateaus that step up then stay, a sawtooth cache that fills
and clears, bursty growth that stops, and a long ramp (8 MiB over the first 200
samples, then flat). Goal: 0 alarms. ``--shapes`` picks some.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "tests"))
from series_shapes import HEALTHY, healthy, replay_alarms  # noqa: E402

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


def false_alarms(kind: str, n: int, check_every: int, seed: int) -> list[int]:
    """The samples at which the healthy series ``kind`` alarms, replayed as the process's
    resident size through a Prober's alarm with the adapter's history (200)."""
    return [i for i, _ in replay_alarms(healthy(kind, n, seed), check_every=check_every)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-samples", type=int, default=40_000)
    ap.add_argument("--healthy", type=int, default=100_000)
    ap.add_argument("--run", nargs=2)
    ap.add_argument("--skip-detection", action="store_true")
    ap.add_argument("--skip-healthy", action="store_true")
    ap.add_argument("--shapes", nargs="*", choices=list(HEALTHY), help="healthy shapes to replay")
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
    if args.skip_healthy:
        return
    print()
    print(f"| healthy series ({args.healthy:,} samples) | leak_check_every | alarms | at "
          "sample |")
    print("|---|---|---|---|")
    for kind in args.shapes or HEALTHY:
        for every in (2, 5, 20):
            at = false_alarms(kind, args.healthy, every, 1)
            print(f"| {kind}: {HEALTHY[kind]} | {every} | {len(at)} | "
                  f"{', '.join(map(str, at)) or '-'} |", flush=True)


if __name__ == "__main__":
    main()
