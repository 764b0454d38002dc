"""Windowed tracing: trace W of every P samples, name the sites that outlive the window."""

from __future__ import annotations

import time
import tracemalloc

import pytest

import memprobe
from memprobe.probes.tracemalloc import TracemallocProbe

HELD: list[bytes] = []


def leak_step() -> None:
    HELD.append(b"x" * 10_000)  # survives: the leak site


def temp_step() -> None:
    tmp = [bytearray(10_000) for _ in range(20)]  # freed before the window ends
    del tmp


def test_window_names_survivors_only():
    assert not tracemalloc.is_tracing()
    HELD.clear()
    prober = memprobe.Prober(
        probes={"tracemalloc": {"window_steps": 5, "period_steps": 20}}, load_entrypoints=False
    )
    tracing = []
    ends = []
    with prober:
        for i in range(40):
            v = prober.sample(step=i)
            tracing.append(tracemalloc.is_tracing())
            if "memprobe/tracemalloc/survivors_bytes" in v:
                ends.append((i, v))
            leak_step()
            temp_step()
    assert not tracemalloc.is_tracing()
    # traced during samples 0-4 and 20-24 only: 10 of 40
    assert sum(tracing) == 10
    assert [i for i, _ in ends] == [5, 25]
    for _, v in ends:
        leak = [k for k in v if "test_tracemalloc_window.py" in k and k.endswith("size_bytes")]
        sizes = {k: v[k] for k in leak}
        # 5 leaked blocks of 10 kB each survive the window; the temporaries do not
        assert any(s >= 5 * 10_000 for s in sizes.values()), sizes
        assert not any("test_tracemalloc_window.py:21/" in k for k in leak), sizes
        assert any("test_tracemalloc_window.py:17/" in k for k in leak), sizes
        assert v["memprobe/tracemalloc/survivors_bytes"] >= 50_000


def work(cpu_seconds: float) -> None:
    """Allocate and free until this process has used ``cpu_seconds`` of CPU time."""
    end = time.process_time() + cpu_seconds
    while time.process_time() < end:
        del [bytearray(64) for _ in range(100)][:]


def traced_share(probe: TracemallocProbe, steps: int, step_seconds: float,
                 idle_every: int = 0) -> tuple[float, int]:
    """Run ``steps`` steps of ``step_seconds`` of CPU work each, asleep for 0.1 s after
    every ``idle_every`` steps (0: never), the probe sampled after each step: the share
    of the work done with tracing on, and the windows opened."""
    traced = total = 0.0
    opened = 0
    try:
        for _ in range(steps):
            t0 = time.process_time()
            work(step_seconds)
            dt = time.process_time() - t0
            total += dt
            traced += dt if tracemalloc.is_tracing() else 0.0
            if idle_every and _ % idle_every == idle_every - 1:
                time.sleep(0.1)
            was = tracemalloc.is_tracing()
            probe.sample()
            opened += tracemalloc.is_tracing() and not was
    finally:
        probe.stop()
    return traced / total, opened


def test_max_tracing_fraction_bounds_the_work_traced():
    """One step traced in every two would be half the work; held to a fifth, the
    windows wait, and tracing runs during about a fifth of the work (never more than
    two windows over it: the first sets no pause), whatever the loop sleeps between
    steps."""
    assert not tracemalloc.is_tracing()
    free, free_windows = traced_share(TracemallocProbe(window_steps=1, period_steps=2), 60, 0.005)
    held, held_windows = traced_share(
        TracemallocProbe(window_steps=1, period_steps=2, max_tracing_fraction=0.2), 60, 0.005)
    # Bursts of 4 steps between waits of 0.1 s (an EnvRunner between sample() calls):
    # counted in wall time, each wait would let a window open, one step in 4 traced.
    idle, _ = traced_share(
        TracemallocProbe(window_steps=1, period_steps=2, max_tracing_fraction=0.1), 60, 0.005,
        idle_every=4)
    assert not tracemalloc.is_tracing()
    assert free > 0.4, free
    assert held <= 0.2 + 2 / 60, held
    assert idle <= 0.1 + 2 / 60, idle
    assert held_windows >= 8 and free_windows >= 25, (held_windows, free_windows)


@pytest.mark.parametrize(
    "opts",
    [{"window_steps": 5}, {"window_steps": 5, "period_steps": 5},
     {"window_steps": 0, "period_steps": 5}, {"window_steps": 2, "period_steps": "9"},
     {"max_tracing_fraction": 0.1},
     {"window_steps": 1, "period_steps": 5, "max_tracing_fraction": 0},
     {"window_steps": 1, "period_steps": 5, "max_tracing_fraction": 1.5},
     {"window_steps": 1, "period_steps": 5, "max_tracing_fraction": True}],
)
def test_window_bad_options(opts):
    with pytest.raises(memprobe.ConfigError, match="tracemalloc"):
        TracemallocProbe(**opts)


def test_default_filters_leave_out_every_memprobe_package() -> None:
    import os

    import memprobe_rllib
    from memprobe._sitestats import default_filters

    patterns = [f.filename_pattern for f in default_filters()]
    for package in (memprobe, memprobe_rllib):
        here = os.path.dirname(os.path.abspath(package.__file__))
        assert os.path.join(here, "*") in patterns, (package.__name__, patterns)
