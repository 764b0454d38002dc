"""The cost of checking kept file descriptors (memprobe._keptfd) where samples are taken.

Interleaved rounds, medians, reported as ratios:

- ``JsonlSink.write`` of a sample to /dev/null, with its identity check (one
  ``fstat``) against a sink whose check is stubbed out;
- ``Prober(probes=["process"]).sample()`` (the flat path), whose process probe checks
  its statm fd with one ``fstat`` per sample, against a Prober built with that
  check stubbed out.

    python benchmarks/kept_fd_check.py
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import memprobe
import memprobe.engine._sinks as sinks
import memprobe.probes.process as process


def _pairs(a: Callable[[], object], b: Callable[[], object], rounds: int = 41,
           n: int = 5000) -> tuple[float, float]:
    ta, tb = [], []
    for _ in range(rounds):
        for fn, out in ((a, ta), (b, tb)):
            t = time.perf_counter()
            for _ in range(n):
                fn()
            out.append((time.perf_counter() - t) / n)
    return statistics.median(ta), statistics.median(tb)


class _Unchecked(memprobe.JsonlSink):
    """The sink with the identity check stubbed out (the same code otherwise)."""


def _always(fd: int, ident: tuple[int, int]) -> bool:
    return True


def main() -> None:
    sample = memprobe.Sample(time.time(), 1, os.getpid(),
                             {f"memprobe/process/m{i}_bytes": i * 4096 for i in range(8)})
    checked = memprobe.JsonlSink("/dev/null")
    unchecked = memprobe.JsonlSink("/dev/null")
    checked.write(sample)
    unchecked.write(sample)
    real = sinks.same_file

    def write_unchecked() -> None:
        sinks.same_file = _always
        unchecked.write(sample)
        sinks.same_file = real

    def write_checked() -> None:
        sinks.same_file = real
        checked.write(sample)
        sinks.same_file = real

    w_check, w_plain = _pairs(write_checked, write_unchecked)
    print(f"JsonlSink.write: {w_check * 1e6:.2f} µs with the fd check, {w_plain * 1e6:.2f} µs "
          f"without: ratio {w_check / w_plain:.3f}")

    with_check = memprobe.Prober(probes=["process"], history=16)
    process.same_file = _always  # the next Prober's flat code binds the stub
    try:
        without = memprobe.Prober(probes=["process"], history=16)
        with_check.sample()
        without.sample()
    finally:
        process.same_file = real
    s_check, s_plain = _pairs(with_check.sample, without.sample, n=2000)
    with_check.stop()
    without.stop()
    print(f"Prober(probes=['process']).sample(): {s_check * 1e6:.2f} µs with the statm fd "
          f"check, {s_plain * 1e6:.2f} µs without: ratio {s_check / s_plain:.3f}")
    checked.close()
    unchecked.close()


if __name__ == "__main__":
    main()
