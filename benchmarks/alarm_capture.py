"""The Prober's deep capture on alarm: steps until the alarm, what the capture costs,
and whether it names the leaking line.

Run: ``python benchmarks/alarm_capture.py [--runs 5] [--leak-from 1500] [--duration 2]``.

Each run: a Prober on ``process`` and ``gc`` only (``leak_check_every=50``, two
confirmations, ``threshold_per_step=16384``) around a loop of cheap steps (a
small list comprehension, about 3 µs); from step ``--leak-from`` on, each step
also keeps a 64 KiB bytearray. The alarm fires, the Prober opens its capture
(tracemalloc window and object counts, ``duration_seconds=--duration``) and
closes it at the end of a sample. Reported per run, then the medians:

- steps from the start of the leak to the alarm;
- ``capture/start_seconds`` and ``capture/finish_seconds`` (opening: an object
  count; closing: a second count, the tracemalloc snapshot, the referrer walk);
- the loop's steps/s while the window is open over steps/s before the leak
  (both with the Prober sampling every step);
- whether the first Python site the capture names is the leaking line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings

import memprobe

LEAKED: list[bytearray] = []


def _cheap_step() -> int:
    return sum([i for i in range(50)])


def _leak() -> None:
    LEAKED.append(bytearray(64 * 1024))


#: The line the capture should name.
LEAK_LINE = f"alarm_capture.py:{_leak.__code__.co_firstlineno + 1}"


class CaptureLines:
    """A sink that keeps the line the capture writes."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def write(self, sample: memprobe.Sample) -> None:
        if "memprobe/capture/duration_seconds" in sample.values:
            self.values = dict(sample.values)

    def close(self) -> None:
        pass


def one_run(leak_from: int, duration: float, max_steps: int = 20000) -> dict[str, float]:
    LEAKED.clear()
    sink = CaptureLines()
    prober = memprobe.Prober(
        probes=["process", "gc"], sink=sink, on_leak=lambda v: None, leak_check_every=50,
        load_entrypoints=False, leak_options={"threshold_per_step": 16384},
        capture_on_leak={"duration_seconds": duration})
    alarm_step = window_steps = 0
    t_before = t_window = 0.0
    t0 = time.perf_counter()
    with prober:
        assert prober.alarm is not None
        for step in range(max_steps):
            ts = time.perf_counter()
            _cheap_step()
            if step >= leak_from:
                _leak()
            prober.sample(step)
            if step == leak_from:
                t_before = (time.perf_counter() - t0) / leak_from
            if prober.alarm.capturing:
                if not alarm_step:
                    alarm_step = step
                else:
                    window_steps += 1
                    t_window += time.perf_counter() - ts
            if prober.alarm.culprits is not None:
                break
    culprits = prober.alarm.culprits
    named = bool(culprits and culprits.python_sites
                 and culprits.python_sites[0][0].endswith(LEAK_LINE))
    LEAKED.clear()
    return {
        "steps_to_alarm": alarm_step - leak_from,
        "start_ms": sink.values.get("memprobe/capture/start_seconds", float("nan")) * 1e3,
        "finish_ms": sink.values.get("memprobe/capture/finish_seconds", float("nan")) * 1e3,
        "slowdown": (t_window / window_steps) / t_before if window_steps else float("nan"),
        "named": float(named),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--leak-from", type=int, default=1500)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--one", action="store_true", help="one run, in this process (JSON out)")
    args = ap.parse_args()
    if args.one:
        for _ in range(2000):
            _cheap_step()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            print(json.dumps(one_run(args.leak_from, args.duration)))
        return
    rows = []
    for i in range(args.runs):  # each run in a fresh process: a heap of its own
        out = subprocess.run(
            [sys.executable, __file__, "--one", "--leak-from", str(args.leak_from),
             "--duration", str(args.duration)], check=True, capture_output=True, text=True)
        r = json.loads(out.stdout.splitlines()[-1])
        rows.append(r)
        print(f"run {i}: " + ", ".join(f"{k}={v:.3g}" for k, v in r.items()), flush=True)
    print("median: " + ", ".join(
        f"{k}={statistics.median(r[k] for r in rows):.3g}" for k in rows[0]))
    print(f"named the line in {sum(int(r['named']) for r in rows)}/{len(rows)} runs")


if __name__ == "__main__":
    main()
