"""Run every benchmark, each bounded to a few minutes: ``python benchmarks/run_all.py``.

``nox -s benchmarks`` calls this. The figures go in docs/performance.md.
"""

from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = [
    (["probe_costs.py"], 120),
    (["site_stats.py"], 600),
    (["rllib_tracing.py", "--pairs", "20"], 900),
    (["leak_accuracy.py"], 600),
    (["soak.py"], 900),
]


def main() -> int:
    failed = 0
    for args, limit in RUNS:
        print(f"== {' '.join(args)} (limit {limit} s)", flush=True)
        try:
            rc = subprocess.run([sys.executable, os.path.join(HERE, args[0]), *args[1:]],
                                timeout=limit).returncode
        except subprocess.TimeoutExpired:
            print(f"{args[0]}: over {limit} s, stopped")
            rc = 1
        failed += rc != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
