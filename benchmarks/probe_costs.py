"""Cost of the default sample against the /proc/self/statm floor and the
MemoryTrackingCallbacks pattern (a new psutil.Process + three memory_info()).

Run: ``python benchmarks/probe_costs.py [--rounds 150]``. The rows are timed
interleaved: each round times every row once (``timeit`` of a short batch),
and each figure is the best round (µs per call), so that other jobs on a
shared box inflate none of them more than the others; ratios come from the
same run. Goals (issue #5): the process + gc probes at most 10 µs, a whole
``Prober.sample()`` with the JSONL sink at most 25 µs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import timeit

import psutil

import memprobe
from memprobe._flatten import flatten
from memprobe._prober import Sample
from memprobe._sinks import JsonlSink
from memprobe.probes.gc import GcProbe
from memprobe.probes.process import ProcessProbe

GOALS = {"process + gc probes": 10.0, "Prober.sample() + JSONL sink": 25.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--batch", type=int, default=200, help="calls per timed batch")
    args = parser.parse_args()

    fd = os.open("/proc/self/statm", os.O_RDONLY)
    proc, gcp = ProcessProbe(), GcProbe()
    proc.start()
    gcp.start()

    def probes_only():
        return proc.sample(), gcp.sample()

    def probes_flat():
        return flatten({"process": proc.sample(), "gc": gcp.sample()})

    reused = psutil.Process()

    def mtc_pattern():
        p = psutil.Process(os.getpid())
        return p.memory_info(), p.memory_info(), p.memory_info()

    tmp = tempfile.mkdtemp()
    prober = memprobe.Prober()
    prober.start()
    sinked = memprobe.Prober(sink=os.path.join(tmp, "prober.jsonl"))
    sinked.start()
    sink = JsonlSink(os.path.join(tmp, "sink.jsonl"))
    one = Sample(prober.history[-1].time_seconds if prober.history else 0.0, None, os.getpid(),
                 prober.sample())
    before = open(os.path.join(tmp, "before.jsonl"), "a", encoding="utf-8", buffering=1)

    def sink_before():  # what JsonlSink.write did at first: json.dumps + a line-buffered write
        record = {"time": one.time_seconds, "step": one.step, "pid": one.pid, "values": one.values}
        before.write(json.dumps(record, separators=(",", ":")) + "\n")

    line = sink._line(one)
    raw_fd = os.open(os.path.join(tmp, "raw.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    rows = [
        ("floor: pread /proc/self/statm (kept fd)", lambda: os.pread(fd, 256, 0), 1),
        ("psutil memory_info(), reused Process", reused.memory_info, 1),
        ("MemoryTrackingCallbacks pattern", mtc_pattern, 10),
        ("process probe", proc.sample, 1),
        ("gc probe", gcp.sample, 1),
        ("process + gc probes", probes_only, 1),
        ("process + gc + flatten", probes_flat, 1),
        ("Prober.sample() (default probes)", prober.sample, 1),
        ("json.dumps + buffered write (at first)", sink_before, 1),
        ("floor of a sink: os.write of one line", lambda: os.write(raw_fd, line), 1),
        ("JsonlSink.write(one default sample)", lambda: sink.write(one), 1),
        ("Prober.sample() + JSONL sink", sinked.sample, 1),
    ]
    best = [float("inf")] * len(rows)
    try:
        for _ in range(args.rounds):
            for i, (_, fn, slow) in enumerate(rows):
                n = max(1, args.batch // slow)
                t = timeit.timeit(fn, number=n) / n * 1e6
                best[i] = min(best[i], t)
    finally:
        sinked.stop()
        prober.stop()
        sink.close()
        before.close()
        os.close(fd)
        os.close(raw_fd)
        shutil.rmtree(tmp, ignore_errors=True)
    floor = best[0]
    mtc = best[2]
    print(f"best of {args.rounds} interleaved rounds, batches of {args.batch} calls")
    print(f"{'what':<40}{'µs/call':>9}{'x floor':>9}{'/ MTC':>8}{'goal µs':>9}")
    for (name, _, _), t in zip(rows, best):
        goal = GOALS.get(name)
        mark = "" if goal is None else f"{goal:>6.0f} {'ok' if t <= goal else 'MISS'}"
        print(f"{name:<40}{t:>9.2f}{t / floor:>9.1f}{t / mtc:>8.3f}{mark:>9}")
    # Prober.sample()'s own cost: what it adds to the probes and flatten.
    own = best[7] - best[6]
    print(f"Prober.sample() own overhead (sample - probes+flatten): {own:.2f} µs")
    print(f"the sink inside the loop (sample+sink - sample): {best[-1] - best[7]:.2f} µs")


if __name__ == "__main__":
    main()
