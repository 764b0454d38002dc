"""CPU per refresh of ``memprobe top`` following 50 growing files.

Run: PYTHONPATH=src python benchmarks/top_refresh.py [--files 50] [--refreshes 20] [--interval 2]

A writer process appends one sample line to each file every 0.25 s (process
and gc keys and five tracemalloc sites, the size ``memprobe run --probes
process,gc,tracemalloc`` writes); the files start with 300 lines each, so
every process's window (240 samples) is full from the first refresh. This
process does what ``memprobe top`` does at each refresh (scan the directory,
read what was appended, judge the processes that changed, build the table) and
prints the CPU seconds (``time.process_time``) of each refresh: median and
the largest, and the first refresh (the backlog) apart.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

WRITER = r"""
import json, os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
def line(pid, i):
    v = {f"memprobe/process/{k}": 1e8 + (i * 65536 if pid % 10 == 0 else i % 7)
         for k in ("rss_bytes", "vms_bytes", "shared_bytes")}
    v.update({"memprobe/process/num_fds": 40, "memprobe/process/num_threads": 20,
              "memprobe/gc/objects_count": 5e4, "memprobe/gc/collections_0_count": i,
              "memprobe/tracemalloc/traced_bytes": 5e6 + i * 100,
              "memprobe/tracemalloc/filtered_bytes": 4e6 + i * 100,
              "memprobe/tracemalloc/overhead_bytes": 1e5})
    for s in range(5):
        v[f"memprobe/tracemalloc/top/app.py:{10 + s}/size_bytes"] = 1e5 * (s + 1) + (
            i * 65536 if pid % 10 == 0 and s == 0 else 0)
    return json.dumps({"time": time.time() if i >= 300 else 1.7e9 + i, "step": None,
                       "pid": pid, "role": "main", "command": f"job{pid}.py",
                       "values": v}) + "\n"
fds = [os.open(os.path.join(d, f"p{p}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
       for p in range(n)]
for p, fd in enumerate(fds):
    os.write(fd, "".join(line(p, i) for i in range(300)).encode())
print("ready", flush=True)
i = 300
while True:
    for p, fd in enumerate(fds):
        os.write(fd, line(p, i).encode())
    i += 1
    time.sleep(0.25)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=50)
    ap.add_argument("--refreshes", type=int, default=20)
    ap.add_argument("--interval", type=float, default=2.0)
    args = ap.parse_args()
    from memprobe.report._top import Board
    from memprobe.cli._top_view import _Local, _plain

    with tempfile.TemporaryDirectory() as d:
        writer = subprocess.Popen([sys.executable, "-c", WRITER, d, str(args.files)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
            source, board = _Local([d]), Board()
            cpu, wall = [], []
            for _ in range(args.refreshes):
                c, w = time.process_time(), time.perf_counter()
                source.poll(board)
                text = _plain(board.refresh())
                cpu.append(time.process_time() - c)
                wall.append(time.perf_counter() - w)
                time.sleep(args.interval)
        finally:
            writer.kill()
            writer.wait()
    assert len(board.rows) == args.files and "LEAK" in text
    rest = cpu[1:]
    print(f"{args.files} files, one line each every 0.25 s, a refresh every "
          f"{args.interval:g} s ({args.interval / 0.25:g} new lines per file per refresh)")
    print(f"first refresh (300 lines per file of backlog): {cpu[0] * 1e3:.0f} ms CPU")
    print(f"then, per refresh: median {statistics.median(rest) * 1e3:.0f} ms CPU "
          f"(max {max(rest) * 1e3:.0f} ms), wall median {statistics.median(wall[1:]) * 1e3:.0f}"
          f" ms; {statistics.median(rest) / args.interval * 100:.1f}% of one core")
    print(json.dumps({"cpu_ms": [round(c * 1e3, 1) for c in cpu]}))


if __name__ == "__main__":
    main()
