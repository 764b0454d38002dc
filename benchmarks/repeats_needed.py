"""How many repeats ``assert_no_leak`` needs to catch a leak of N bytes per call.

Run: ``python benchmarks/repeats_needed.py [--sizes 64 256 1024 4096 16384]
[--repeats 10 20 30 50 100 200] [--max-growth 100000]``.

Each cell calls ``memprobe.assert_no_leak`` (warm-up 5, the default tolerance
unless ``--max-growth``) on a function that keeps ``bytearray(N)`` per call, and
prints whether it failed (``caught``) or passed (``-``). The rule the table
follows: caught once the growth over the calls judged, about
``(N + 57) x (repeats - 5)`` bytes, exceeds ``max_growth_bytes``, the slope being
significant long before that.
"""

from __future__ import annotations

import argparse

import memprobe


def caught(size: int, repeats: int, max_growth: float) -> bool:
    kept: list[bytearray] = []

    def leaky() -> None:
        kept.append(bytearray(size))

    try:
        memprobe.assert_no_leak(leaky, repeats=repeats, max_growth_bytes=max_growth)
    except memprobe.LeakError:
        return True
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[64, 256, 1024, 4096, 16384])
    ap.add_argument("--repeats", type=int, nargs="*", default=[10, 20, 30, 50, 100, 200])
    ap.add_argument("--max-growth", type=float, default=100_000)
    args = ap.parse_args()
    print(f"max_growth_bytes={args.max_growth:g}, warmup=5")
    print("| bytes per call | " + " | ".join(f"{r} repeats" for r in args.repeats) + " |")
    print("|---:|" + ":-:|" * len(args.repeats))
    for size in args.sizes:
        cells = ["caught" if caught(size, r, args.max_growth) else "-" for r in args.repeats]
        print(f"| {size} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
