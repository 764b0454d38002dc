"""What memprobe costs a short script: ``import memprobe`` and the first sample.

Run: ``python benchmarks/import_time.py [--runs 11]``. Two figures:

- **first sample**: wall time of ``python -c 'import memprobe;
  memprobe.Prober().sample()'`` minus that of ``python -c pass``, each a fresh
  interpreter, the two interleaved run by run so a busy machine inflates both
  alike; the median of ``--runs`` pairs. Goal (issue 29): at most 60 ms.
- **import**: memprobe's cumulative import time as ``-X importtime`` reports
  it (the interpreter's own start-up left out), with ``import pluggy`` timed in
  the same runs for scale. Goal (issue 18): under 60 ms.

The slowest imports of the median first-sample run are listed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

GOAL_MS = 60.0
FIRST_SAMPLE = "import memprobe; memprobe.Prober().sample()"


def child_env(src: str | None = None) -> dict[str, str]:
    """The children's environment: bytecode caches written and used, as an installed
    package has them (``PYTHONDONTWRITEBYTECODE`` would compile every module every run);
    ``src`` first on ``PYTHONPATH`` when given."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if src is not None:
        env["PYTHONPATH"] = src
    return env


def wall_ms(code: str, src: str | None = None) -> float:
    """Milliseconds from start to exit of ``python -c code``."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=child_env(src))
    return (time.perf_counter() - t) * 1e3


def import_profile(code: str, module: str) -> tuple[float, list[tuple[int, str]]]:
    """``module``'s cumulative import time in ms under ``-X importtime``, and every row."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                         capture_output=True, text=True, check=True, env=child_env()).stderr
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
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--baseline-src", metavar="DIR",
                        help="also time the first sample of the memprobe in DIR (another "
                        "checkout's src), interleaved with the rest")
    args = parser.parse_args()
    wall_ms("pass")  # warm the file cache
    wall_ms(FIRST_SAMPLE)  # write the bytecode and entry-point caches
    if args.baseline_src:
        wall_ms(FIRST_SAMPLE, args.baseline_src)
    bare, probed, imports, pluggy, base = [], [], [], [], []
    for _ in range(args.runs):
        bare.append(wall_ms("pass"))
        probed.append(wall_ms(FIRST_SAMPLE))
        if args.baseline_src:
            base.append(wall_ms(FIRST_SAMPLE, args.baseline_src) - bare[-1])
        imports.append(import_profile("import memprobe", "memprobe")[0])
        pluggy.append(import_profile("import pluggy", "pluggy")[0])
    deltas = [p - b for p, b in zip(probed, bare)]
    med = statistics.median(deltas)
    print(f"python -c pass: median {statistics.median(bare):.1f} ms")
    print(f"python -c {FIRST_SAMPLE!r}: median {statistics.median(probed):.1f} ms")
    print(f"first sample costs: median {med:.1f} ms more over {args.runs} interleaved pairs "
          f"(min {min(deltas):.1f}, max {max(deltas):.1f}); goal {GOAL_MS:.0f} ms: "
          f"{'ok' if med <= GOAL_MS else 'MISS'}")
    if base:
        print(f"the same with {args.baseline_src}: median {statistics.median(base):.1f} ms more")
    imp = statistics.median(imports)
    print(f"import memprobe: median {imp:.1f} ms (-X importtime, cumulative); import pluggy "
          f"(a dependency, for scale): median {statistics.median(pluggy):.1f} ms")
    _, rows = import_profile(FIRST_SAMPLE, "memprobe")
    print("largest cumulative imports of a first-sample run (ms):")
    for cum, name in sorted(rows, reverse=True)[:12]:
        print(f"  {cum / 1000:8.1f}  {name}")


if __name__ == "__main__":
    main()
