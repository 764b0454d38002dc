"""Allocation-site statistics: memprobe's raw-trace path vs take_snapshot().statistics()
and vs the raw copy alone, at 10k / 100k / 1M traced blocks over 1,000 sites.

Run: ``python benchmarks/site_stats.py [--blocks 10000 100000 1000000] [--nframe 1]``.

``--user`` measures ``group_by="user"`` (a library line named after the user's
own line that called it) against ``group_by="lineno"`` on the same traces: the
allocating functions then live in a file under the standard library and are
called from a user file, so every site needs the walk up the traceback.
Both paths include copying the traces out (``_get_traces()``), with the
default filters; the results are checked equal. Times are the best of
``--repeat`` runs (seconds), taken while tracing, as the probe would run;
raw copy and memprobe runs are interleaved, and memprobe/raw is the median
of the per-pair ratios.
"""

from __future__ import annotations

import _tracemalloc
import argparse
import gc
import statistics
import time
import tracemalloc

from memprobe._sitestats import default_filters, stats_from_snapshot, stats_from_traces

SITES = 1000


def timed(fn) -> float:
    gc.collect()
    t = time.perf_counter()
    res = fn()
    t = time.perf_counter() - t
    del res
    return t


def best(fn, repeat):
    return min(timed(fn) for _ in range(repeat))


def pairs(fa, fb, repeat) -> tuple[float, float, float]:
    """Interleaved runs of fa and fb: best of each, and the median of the ratios b / a."""
    ta, tb = [], []
    for _ in range(repeat):
        ta.append(timed(fa))
        tb.append(timed(fb))
    return min(ta), min(tb), statistics.median(b / a for a, b in zip(ta, tb))


def run(blocks: int, nframe: int, repeat: int,
        user: bool = False) -> tuple[float, float, float, float, bool]:
    src = "\n".join(
        f"def f{i}(n):\n    return [bytes(8 + {i % 50}) for _ in range(n)]" for i in range(SITES)
    )
    ns: dict = {}
    tracemalloc.start(nframe)
    try:
        exec(compile(src, "/bench/synthetic_sites.py", "exec"), ns)
        held = [ns[f"f{i}"](blocks // SITES) for i in range(SITES)]
        if user:
            return run_user(held, blocks, repeat)
        filters = default_filters()
        t_raw, t_fast, ratio = pairs(
            lambda: len(_tracemalloc._get_traces()),
            lambda: stats_from_traces(_tracemalloc._get_traces(), "lineno", filters),
            repeat,
        )
        t_std = best(lambda: stats_from_snapshot(tracemalloc.take_snapshot(), "lineno", filters),
                     1 if blocks >= 1_000_000 else repeat)
        raw = _tracemalloc._get_traces()
        same = stats_from_traces(raw, "lineno", filters) == stats_from_snapshot(
            tracemalloc.Snapshot(raw, nframe), "lineno", filters)
        del raw, held
    finally:
        tracemalloc.stop()
    return t_raw, t_fast, t_std, ratio, same


def run_user(held: list, blocks: int, repeat: int) -> tuple[float, float, float, float, bool]:
    """lineno vs user over the same number of blocks, allocated in a library file."""
    import sysconfig

    del held[:]
    lib = "\n".join(f"def g{i}(n):\n    return [bytes(8 + {i % 50}) for _ in range(n)]"
                     for i in range(SITES))
    ns: dict = {}
    exec(compile(lib, sysconfig.get_paths()["stdlib"] + "/synthetic_lib.py", "exec"), ns)
    caller = "\n".join(f"def c{i}(n):\n    return g{i}(n)" for i in range(SITES))
    exec(compile(caller, "/bench/caller.py", "exec"), ns)
    held = [ns[f"c{i}"](blocks // SITES) for i in range(SITES)]
    filters = default_filters()
    t_line, t_user, ratio = pairs(
        lambda: stats_from_traces(_tracemalloc._get_traces(), "lineno", filters),
        lambda: stats_from_traces(_tracemalloc._get_traces(), "user", filters),
        repeat,
    )
    users = stats_from_traces(_tracemalloc._get_traces(), "user", filters)
    # Every library site is named after the user line that called it.
    named = sum(k.startswith("bench/caller.py:") and "--synthetic_lib.py:" in k
                for k in users) == SITES
    del held
    return t_line, t_user, 0.0, ratio, named


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--nframe", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--user", action="store_true",
                        help='group_by="user" against "lineno" (library allocations)')
    args = parser.parse_args()
    if args.user:
        print(f"nframe={args.nframe}, {SITES} sites allocated in a stdlib-path file, "
              "called from a user file, default filters")
        print(f"{'blocks':>9}{'lineno s':>11}{'user s':>10}{'user/lineno':>13}{'named':>7}")
        for n in args.blocks:
            t_line, t_user, _, ratio, named = run(n, args.nframe, args.repeat, user=True)
            print(f"{n:>9}{t_line:>11.4f}{t_user:>10.4f}{ratio:>13.2f}{named!s:>7}")
        return
    print(f"nframe={args.nframe}, {SITES} sites, group_by=lineno, default filters")
    print(f"{'blocks':>9}{'raw copy s':>12}{'memprobe s':>12}{'stdlib s':>11}"
          f"{'stdlib/memprobe':>17}{'memprobe/raw':>14}{'equal':>7}")
    for n in args.blocks:
        t_raw, t_fast, t_std, ratio, same = run(n, args.nframe, args.repeat)
        print(f"{n:>9}{t_raw:>12.4f}{t_fast:>12.4f}{t_std:>11.4f}{t_std / t_fast:>17.1f}"
              f"{ratio:>14.2f}{same!s:>7}")


if __name__ == "__main__":
    main()
