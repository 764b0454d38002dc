"""Synthetic resident sizes shared by the leak tests and ``benchmarks/slow_leak_detection.py``:
the healthy shapes a long run goes through (a warm-up, plateaus, a cache that fills and
clears, bursty growth that stops, a long ramp), leaks at a rate, and a Prober whose probe
replays one of them through the live alarm (the real path: tiers, checks, confirmations).

Importable from the tests (their directory is on ``sys.path``) and from the benchmarks
(which add it).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import memprobe

MIB = 1 << 20
#: A process's resident size before the shapes add to it.
LEVEL_BYTES = 500 * MIB
#: What the allocator adds to the resident size when a leak's heap passes it.
PAGE_STEP_BYTES = 262_144

#: The healthy shapes of :func:`healthy`, and what each one is.
HEALTHY = {
    "warm-up": "8 MiB over the first 40 samples, then flat",
    "plateaus": "steps of 2 MiB every 5,000 samples, up to 30,000, then flat",
    "sawtooth": "a cache that fills 4 MiB over 400 samples, then clears, again and again",
    "bursty": "a level that rises to 2 MiB over 20,000 samples, halved every other "
              "1,000 samples, then flat",
    "long ramp": "8 MiB over the first 200 samples, then flat",
}


def allocator_noise(rng: random.Random) -> float:
    """One sample's noise: gaussian jitter and 0-2 allocator pages that come and go."""
    return rng.gauss(0, 30_000) + PAGE_STEP_BYTES * rng.randrange(3)


def healthy(kind: str, n: int, seed: int = 1, level: float = LEVEL_BYTES) -> list[float]:
    """``n`` samples of the healthy shape ``kind`` (a key of :data:`HEALTHY`) on top of
    ``level``, with :func:`allocator_noise`."""
    if kind not in HEALTHY:
        raise ValueError(f"unknown shape {kind!r} (shapes: {', '.join(HEALTHY)})")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if kind == "warm-up":
            y = 8 * MIB * min(i, 40) / 40
        elif kind == "long ramp":
            y = 8 * MIB * min(i, 200) / 200
        elif kind == "plateaus":
            y = 2 * MIB * min(i // 5000, 6)
        elif kind == "sawtooth":
            y = 4 * MIB * ((i % 400) / 400)
        else:  # bursty
            y = MIB * min(i, 20_000) // 100 / 100 * (1 if (i // 1000) % 2 else 0.5)
        out.append(level + y + allocator_noise(rng))
    return out


def leaking(per_sample_bytes: float, n: int, seed: int = 1, level: float = LEVEL_BYTES,
            start: int = 0) -> list[float]:
    """``n`` samples of a leak of ``per_sample_bytes`` from sample ``start``: the resident
    size grows in allocator steps of :data:`PAGE_STEP_BYTES` as the heap passes them,
    with gaussian jitter."""
    rng = random.Random(seed)
    return [level + (per_sample_bytes * max(0, i - start) // PAGE_STEP_BYTES) * PAGE_STEP_BYTES
            + rng.gauss(0, 30_000) for i in range(n)]


def mixed_healthy(seed: int, n: int) -> list[float]:
    """A healthy series of every transient at once, around 500 MB: a warm-up, a sawtooth
    cache of 60 samples, bursts that come and go, allocator pages."""
    rng = random.Random(seed)
    out, level = [], 5e8
    for i in range(n):
        warm = 4e6 * min(i, 30) / 30
        saw = 2e6 * ((i % 60) / 60)
        burst = 3e6 if (i // 500) % 3 == 1 else 0.0
        step = PAGE_STEP_BYTES * rng.randrange(3)
        out.append(level + warm + saw + burst + step + rng.gauss(0, 20000))
    return out


def replay_plugin(series: Sequence[float], probe: str, metric: str) -> Any:
    """A plugin registering the probe ``probe`` whose samples are ``{metric: value}``, the
    values of ``series`` in order (from the start again after the last)."""

    class Replay:
        def __init__(self) -> None:
            self.i = 0

        def start(self) -> None: ...

        def stop(self) -> None: ...

        def sample(self) -> dict[str, float]:
            self.i += 1
            return {metric: series[(self.i - 1) % len(series)]}

    class Plugin:
        @memprobe.hookimpl
        def memprobe_register_probes(self, register: Callable[..., None]) -> None:
            register(probe, Replay)

    return Plugin()


def replay_alarms(series: Sequence[float], *, check_every: int = 20, history: int = 200,
                  probe: str = "process", metric: str = "rss_bytes",
                  stop_at_first: bool = False) -> list[tuple[int, memprobe.Verdict]]:
    """Replay ``series`` through a Prober's live alarm; returns ``(sample index, verdict)``
    of each alarm.

    With ``probe="process"`` (the default) the series stands in for the process probe,
    so it is judged as the process's resident size, with its floors (0.5% of it); under
    any other name it is a metric of its own, whose floor is 16 KiB.
    """
    pm = memprobe.get_plugin_manager(load_entrypoints=False,
                                     disable=["process"] if probe == "process" else ())
    pm.register(replay_plugin(series, probe, metric))
    fired: list[tuple[int, memprobe.Verdict]] = []
    i = 0
    with memprobe.Prober([probe], plugin_manager=pm, history=history,
                         on_leak=lambda v: fired.append((i, v)), leak_check_every=check_every,
                         leak_options={"metrics": [f"{probe}/{metric}"]}) as prober:
        for i in range(len(series)):
            prober.sample(step=i)
            if fired and stop_at_first:
                break
    return fired
