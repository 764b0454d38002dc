"""Memory and time of reading a JSONL file holding one 200 MB line (issue 19, case 6).

Run: PYTHONPATH=src python benchmarks/reader_memory.py [SIZE_MIB]

Writes a three-line file (good, a 200 MB tag value, good) to a temporary
directory and reads it with memprobe.read_samples in a fresh interpreter;
prints the growth of the reader's peak rss (VmHWM) and the wall time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

MEASURE = """
import sys, time, warnings
import memprobe

def hwm_kib():  # this process's peak rss (VmHWM: not inherited from the parent, unlike ru_maxrss)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

before = hwm_kib()
t = time.perf_counter()
with warnings.catch_warnings(record=True):
    warnings.simplefilter("always")
    read = getattr(memprobe, "read_samples", None)
    if read is None:  # memprobe before the reader was public
        from memprobe.report._jsonl import read_samples as read
    n = len(read(sys.argv[1]))
dt = time.perf_counter() - t
grew = (hwm_kib() - before) // 1024
print(f"{n} samples kept; peak rss grew {grew} MiB; {dt:.2f} s")
"""


def main() -> None:
    size_mib = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    good = {"time": 1.0, "step": 0, "pid": 1, "values": {
        "memprobe/process/rss_bytes": 1, "memprobe/overhead/sample_seconds": 1e-5}}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "huge.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps(good) + "\n")
            f.write(json.dumps({**good, "blob": "x" * (size_mib * 2**20)}) + "\n")
            f.write(json.dumps(good) + "\n")
        print(f"a {size_mib} MiB line between two good ones:")
        subprocess.run([sys.executable, "-c", MEASURE, path], check=True)


if __name__ == "__main__":
    main()
