"""Rows timed interleaved: every round times one batch of calls of every row, so that
other jobs on a shared machine inflate no row more than the others. The benchmarks
take the median (and some the best) of each row's rounds."""

from __future__ import annotations

import time
import timeit
from collections.abc import Callable, Sequence


def time_rows(rows: Sequence[tuple[str, Callable[[], object]]], rounds: int, batch: int,
              timer: Callable[[], float] = time.perf_counter) -> list[list[float]]:
    """For each row, µs per call in each round, timed by ``timer``."""
    times: list[list[float]] = [[] for _ in rows]
    for _ in range(rounds):
        for i, (_, fn) in enumerate(rows):
            times[i].append(timeit.timeit(fn, number=batch, timer=timer) / batch * 1e6)
    return times
