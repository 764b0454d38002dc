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


def traced_share(probe: TracemallocProbe, steps: int, step_seconds: float) -> tuple[float, int]:
    """Run ``steps`` steps of ``step_seconds`` each, the probe sampled after each:
    the share of the loop's time spent with tracing on, and the windows opened."""
    traced = total = 0.0
    opened = 0
    try:
        for _ in range(steps):
            t0 = time.perf_counter()
            time.sleep(step_seconds)
            dt = time.perf_counter() - t0
            total += dt
            traced += dt if tracemalloc.is_tracing() else 0.0
            was = tracemalloc.is_tracing()
            probe.sample()
            opened += tracemalloc.is_tracing() and not was
    finally:
        probe.stop()
    return traced / total, opened


def test_max_tracing_fraction_bounds_the_time_traced():
    """One step traced in every two would be half the time; held to a fifth, the
    windows wait, and tracing runs about a fifth of the time (never more than a
    window's length over it)."""
    assert not tracemalloc.is_tracing()
    free, free_windows = traced_share(TracemallocProbe(window_steps=1, period_steps=2), 60, 0.005)
    held, held_windows = traced_share(
        TracemallocProbe(window_steps=1, period_steps=2, max_tracing_fraction=0.2), 60, 0.005)
    assert not tracemalloc.is_tracing()
    assert free > 0.4, free
    assert held <= 0.2 + 1 / 60, held
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
