"""Memory of the reading process: one huge line, and ``memprobe report`` on N files of M MiB.

Run: PYTHONPATH=src python benchmarks/reader_memory.py [SIZE_MIB]
     PYTHONPATH=src python benchmarks/reader_memory.py --grid 1x1,1x8,1x32,16x1,16x8,64x1

Without ``--grid`` (issue 19, case 6): writes a three-line file (good, a 200 MB
tag value, good) to a temporary directory and reads it with memprobe.read_samples
in a fresh interpreter; prints the growth of the reader's peak rss (VmHWM) and
the wall time.

With ``--grid NxM,...`` (issue 26): writes N files of M MiB (one process each, the
lines of benchmarks/ray_report_cost.py: process and gc keys, 5 s apart) and runs
``memprobe report FILES`` in a fresh interpreter, ``--repeat`` times (medians);
prints its seconds and how much its peak rss grew over the peak once memprobe's
report modules were imported. Run it with ``PYTHONPATH`` at another checkout's
``src`` for the figures before a change.
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


REPORT = """
import contextlib, io, sys, time
def hwm_mib():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
import memprobe.cli
try:  # the report's modules and the plugins' declarations, loaded by every report
    import memprobe.report._runs, memprobe.report._render_text, memprobe.leak._verdicts
    from memprobe._registry import installed_declarations as declarations
except ImportError:  # a checkout before the modules moved into sub-packages
    import importlib
    for name in ("_render_text", "_verdicts"):
        importlib.import_module("memprobe." + name)
    declarations = importlib.import_module("memprobe." + "_runs").declarations
declarations()
base = hwm_mib()
t = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    assert memprobe.cli.main(["report", *sys.argv[1:]]) == 0
print(f"{time.perf_counter() - t:.3f} {hwm_mib() - base:.1f}")
"""


def grid(spec: str, repeat: int) -> None:
    import statistics

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from ray_report_cost import write_files  # the same files as the --ray benchmark

    print("memprobe report FILES, medians of", repeat, "runs: seconds / growth of the "
          "peak rss of the reading process (MiB)")
    print(f"{'N':>4} {'MiB':>5} {'total':>6} {'samples':>9} {'seconds':>8} {'peak MiB':>9}")
    for n, mib in [(int(a), float(b)) for a, b in (g.split("x") for g in spec.split(","))]:
        with tempfile.TemporaryDirectory() as d:
            files = write_files([d], n, mib)
            with open(files[0]) as f:
                samples = n * sum(1 for _ in f)
            got = []
            for _ in range(repeat):
                r = subprocess.run([sys.executable, "-c", REPORT, *files], check=True,
                                   capture_output=True, text=True, timeout=3600)
                seconds, peak = r.stdout.split()
                got.append((float(seconds), float(peak)))
        print(f"{n:>4} {mib:>5g} {n * mib:>6g} {samples:>9,} "
              f"{statistics.median(s for s, _ in got):>8.2f} "
              f"{statistics.median(p for _, p in got):>9.0f}", flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--grid":
        repeat = 3
        if "--repeat" in sys.argv:
            repeat = int(sys.argv[sys.argv.index("--repeat") + 1])
        grid(sys.argv[2], repeat)
        return
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
