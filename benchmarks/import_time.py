"""How long ``import memprobe`` takes: the median over fresh interpreters.

Run: ``python benchmarks/import_time.py [--runs 21]``. Each run is a new
``python -X importtime -c "import memprobe"``; the figure is memprobe's
cumulative import time as ``-X importtime`` reports it (µs, then ms), so the
interpreter's own start-up is left out. ``import pluggy`` is timed in the
same runs, for scale on a busy machine. Goal (issue 18): under 60 ms. The
slowest imports of the median run are listed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

GOAL_MS = 60.0


def one_run(module: str = "memprobe") -> tuple[float, list[tuple[int, str]]]:
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                         capture_output=True, text=True, check=True, env=os.environ).stderr
    rows = []
    total = 0.0
    for line in out.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        try:
            _, cumulative, name = line.split("|")
            cum = int(cumulative)
        except ValueError:
            continue
        rows.append((cum, name.rstrip()))
        if name.strip() == module:
            total = cum / 1000
    return total, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    runs = []
    reference = []  # pluggy, which memprobe needs: a yardstick on a busy machine
    for _ in range(args.runs):
        runs.append(one_run())
        reference.append(one_run("pluggy")[0])
    totals = [t for t, _ in runs]
    med = statistics.median(totals)
    print(f"import pluggy (a dependency, for scale): median {statistics.median(reference):.1f} ms")
    print(f"import memprobe: median {med:.1f} ms over {args.runs} fresh interpreters "
          f"(min {min(totals):.1f}, max {max(totals):.1f}); goal {GOAL_MS:.0f} ms: "
          f"{'ok' if med <= GOAL_MS else 'MISS'}")
    _, rows = min(runs, key=lambda r: abs(r[0] - med))
    print("largest cumulative imports in the median run (ms):")
    for cum, name in sorted(rows, reverse=True)[:12]:
        print(f"  {cum / 1000:8.1f}  {name}")


if __name__ == "__main__":
    main()
