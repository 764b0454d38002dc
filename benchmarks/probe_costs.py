"""Cost of the default sample against the /proc/self/statm floor and the
MemoryTrackingCallbacks pattern (a new psutil.Process + three memory_info()).

Run: ``python benchmarks/probe_costs.py``. Each figure is the best of 7
repeats of timeit (µs per call); ratios are taken in the same run.
"""

from __future__ import annotations

import os
import tempfile
import timeit

import psutil

import memprobe
from memprobe._flatten import flatten
from memprobe.probes.gc import GcProbe
from memprobe.probes.process import ProcessProbe


def us(fn, number=5000, repeat=7) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
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

    prober = memprobe.Prober()
    prober.start()
    tmp = tempfile.mkdtemp()
    sinked = memprobe.Prober(sink=os.path.join(tmp, "s.jsonl"))
    sinked.start()
    rows = [
        ("floor: pread /proc/self/statm (kept fd)", us(lambda: os.pread(fd, 256, 0))),
        ("psutil memory_info(), reused Process", us(reused.memory_info)),
        ("MemoryTrackingCallbacks pattern", us(mtc_pattern, number=1000)),
        ("process probe", us(proc.sample)),
        ("gc probe", us(gcp.sample)),
        ("process + gc probes", us(probes_only)),
        ("process + gc + flatten", us(probes_flat)),
        ("Prober.sample() (default probes)", us(prober.sample)),
        ("Prober.sample() + JSONL sink", us(sinked.sample)),
    ]
    sinked.stop()
    prober.stop()
    floor = rows[0][1]
    mtc = rows[2][1]
    print(f"{'what':<44}{'µs/call':>9}{'x floor':>9}{'/ MTC':>8}")
    for name, t in rows:
        print(f"{name:<44}{t:>9.2f}{t / floor:>9.1f}{t / mtc:>8.3f}")


if __name__ == "__main__":
    main()
