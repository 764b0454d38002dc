"""What the operations a default sample is made of cost on this machine and interpreter.

Run: ``python benchmarks/hot_path_parts.py [--rounds 100] [--batch 500]``.

``benchmarks/probe_costs.py`` times the sample and its probes; this times the
operations under them, interleaved the same way (the median over rounds of a
batch timed on this thread's CPU clock), so that docs/performance.md can say where
a default sample's time goes and what no pure-Python sampler can avoid: the
system calls, parsing ``/proc/self/statm``, building the dict of 25 values that
``sample()`` returns and packing those values into the history.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import struct
import sys
import threading
import time

from interleaved import time_rows

import memprobe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--batch", type=int, default=500, help="calls per timed batch")
    args = parser.parse_args()

    with memprobe.Prober(["process", "gc"], load_entrypoints=False) as prober:
        prober.sample()
        time.sleep(1.05)  # overhead/fraction is in every sample from 1 s on
        values = prober.sample()
    keys = tuple(values)
    six, fifteen = dict(list(values.items())[:6]), dict(list(values.items())[6:21])
    ns: dict[str, object] = {}
    # A display of the default sample's keys as constants, as the compiled paths build.
    exec("def display():\n    return {" + ", ".join(f"{k!r}: 1" for k in keys) + "}\n", ns)
    display = ns["display"]
    packer = struct.Struct("=" + "".join("q" if type(v) is int else "d"
                                         for v in values.values()))
    buf = bytearray(packer.size)
    statm = os.open("/proc/self/statm", os.O_RDONLY)
    task = os.open("/proc/self/task", os.O_RDONLY)
    text = os.pread(statm, 256, 0)
    lock = threading.RLock()

    def with_lock() -> None:
        with lock:
            pass

    rows = [
        ("os.pread of /proc/self/statm", lambda: os.pread(statm, 256, 0)),
        ("os.fstat of /proc/self/task (a thread count)", lambda: os.fstat(task)),
        ("gc.get_count()", gc.get_count),
        ("gc.get_stats()", gc.get_stats),
        ("statm parsed: split and four int()s", lambda: (
            (f := text.split()), int(f[0]), int(f[1]), int(f[2]), int(f[5]))),
        ("time.perf_counter()", time.perf_counter),
        ("time.time()", time.time),
        ("threading.get_ident()", threading.get_ident),
        ("with an RLock", with_lock),
        (f"a dict display of the {len(keys)} keys of a default sample", display),
        ("a 6-key dict updated with 15 more", lambda: six.copy().update(fifteen)),
        (f"struct pack_into of the {len(keys)} values", lambda: packer.pack_into(
            buf, 0, *values.values())),
        ("a call of a function that does nothing", lambda: None),
    ]
    try:
        times = time_rows(rows, args.rounds, args.batch, time.thread_time)
    finally:
        os.close(statm)
        os.close(task)
    call = statistics.median(times[-1])
    print(f"median of {args.rounds} interleaved rounds, batches of {args.batch} calls, cpu "
          f"clock; Python {platform.python_version()} ({sys.executable}); µs per call, "
          f"less the {call:.3f} µs of calling the timed lambda")
    for (name, _), t in zip(rows, times):
        print(f"{name:<58}{statistics.median(t) - call:>8.3f}")


if __name__ == "__main__":
    main()
