"""Cost of a default sample against its floor, measured in the same run.

Run: ``python benchmarks/probe_costs.py [--rounds 200] [--batch 200]``.

Rows are timed interleaved: each round times every row once (``timeit`` of a
batch of calls), and each figure is the **median** over rounds, in µs per
call, so that other jobs on a shared machine inflate no row more than the
others; by default each batch is timed on this thread's CPU clock, which
time spent preempted by other processes does not inflate (``--clock wall`` for
``perf_counter``). The floor is what any sampler of rss and gc state must do: one
``os.pread`` of ``/proc/self/statm`` plus ``gc.get_count()`` and
``gc.get_stats()``.

Goals: ``Prober(probes=["process", "gc"]).sample()`` with the default history at
most 4x the floor (issue 25) and 10 µs median (issue 15); with the JSONL sink at
most 15 µs. The other rows show where the time goes: each probe's ``sample()``
(a row of its ``columns``), checking and pairing those rows with their keys (what
the Prober does with them), the history, the sink, and a Prober that counts fds and
threads in every sample (``count_max_age_seconds=0``: the default re-counts them
when the last count is over 100 µs old, which in this loop is every few samples).
``benchmarks/hot_path_parts.py`` times the operations under these rows.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

from interleaved import time_rows

import memprobe
from memprobe import JsonlSink, Sample
from memprobe._flatten import check_row
from memprobe.probes.gc import GcProbe
from memprobe.probes.process import ProcessProbe

GOALS = {"Prober.sample() (default)": 10.0, "Prober.sample() + JSONL sink": 15.0}
DEFAULT = "Prober.sample() (default)"
FLOOR_RATIO_GOAL = 4.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--batch", type=int, default=200, help="calls per timed batch")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="cpu: this thread's CPU time (time.thread_time), which other "
                        "jobs on a busy machine do not inflate; wall: time.perf_counter")
    args = parser.parse_args()
    timer = time.thread_time if args.clock == "cpu" else time.perf_counter

    fd = os.open("/proc/self/statm", os.O_RDONLY)

    def floor() -> object:
        return os.pread(fd, 256, 0), gc.get_count(), gc.get_stats()

    proc, gcp = ProcessProbe(), GcProbe()
    proc.start()
    gcp.start()
    tmp = tempfile.mkdtemp()
    prober = memprobe.Prober(["process", "gc"], load_entrypoints=False).start()
    sinked = memprobe.Prober(["process", "gc"], sink=os.path.join(tmp, "prober.jsonl"),
                             load_entrypoints=False).start()
    counting = memprobe.Prober({"process": {"count_max_age_seconds": 0}, "gc": {}},
                               load_entrypoints=False).start()
    values = prober.sample()
    keys = [tuple(f"memprobe/{name}/{c}" for c in p.columns) for name, p in
            (("process", proc), ("gc", gcp))]

    def pair() -> object:  # what the Prober does with the two rows
        k: list[str] = []
        row: list[object] = []
        for ks, r in zip(keys, (proc.sample(), gcp.sample())):
            k += ks
            row += check_row(ks, r)
        return dict(zip(k, row))

    one = Sample(0.0, None, os.getpid(), values)
    sink = JsonlSink(os.path.join(tmp, "sink.jsonl"))
    history = memprobe.History(1000)

    twenty = range(20)

    def bytecode() -> int:  # how fast this interpreter runs bytecode, to compare machines
        x = 0
        for i in twenty:
            x += i
        return x

    rows = [
        ("floor: pread statm + gc.get_count + gc.get_stats", floor),
        ("interpreter: a loop of 20 `x += i`", bytecode),
        ("process probe: sample() (a row)", proc.sample),
        ("gc probe: sample() (a row)", gcp.sample),
        ("both sample()s, checked and paired with their keys", pair),
        ("History.append (default sample)", lambda: history.append(0.0, None, 1, values)),
        ("JsonlSink.write (default sample)", lambda: sink.write(one)),
        ("Prober.sample() (default)", prober.sample),
        ("Prober.sample(), fds/threads counted every sample", counting.sample),
        ("Prober.sample() + JSONL sink", sinked.sample),
    ]
    try:
        times = time_rows(rows, args.rounds, args.batch, timer)
    finally:
        sinked.stop()
        counting.stop()
        prober.stop()
        proc.stop()
        gcp.stop()
        sink.close()
        os.close(fd)
        shutil.rmtree(tmp, ignore_errors=True)
    med = [statistics.median(t) for t in times]
    floor_us = med[0]
    print(f"median of {args.rounds} interleaved rounds, batches of {args.batch} calls, "
          f"{args.clock} clock; Python {platform.python_version()} ({sys.executable})")
    print(f"{'what':<54}{'µs/call':>9}{'x floor':>9}{'goal':>12}")
    for (name, _), t in zip(rows, med):
        goal = GOALS.get(name)
        mark = ""
        if goal is not None:
            ok = t <= goal and (name != DEFAULT or t <= FLOOR_RATIO_GOAL * floor_us)
            mark = f"{goal:>5.0f} µs {'ok' if ok else 'MISS'}"
        print(f"{name:<54}{t:>9.2f}{t / floor_us:>9.1f}{mark:>12}")


if __name__ == "__main__":
    main()
