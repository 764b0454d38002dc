"""budget=: a costly probe is spaced out so probe time stays under the fraction."""

from __future__ import annotations

import time

import memprobe


def _run(budget, seconds=0.8):
    prober = memprobe.Prober(probes=["objects"], budget=budget, load_entrypoints=False)
    ran = 0
    spent = 0.0
    cheapest = float("inf")
    fraction = None
    t0 = time.perf_counter()
    with prober:
        while time.perf_counter() - t0 < seconds:
            sum(i * i for i in range(2000))  # the user's step, ~100 us
            v = prober.sample()
            if "memprobe/overhead/objects_seconds" in v:
                ran += 1
                spent += v["memprobe/overhead/objects_seconds"]
                cheapest = min(cheapest, v["memprobe/overhead/objects_seconds"])
                fraction = v.get("memprobe/overhead/fraction", fraction)
    wall = time.perf_counter() - t0
    return ran, spent / wall, fraction, wall, cheapest


def test_budget_keeps_costly_probe_under_fraction():
    ran, _measured, reported, wall, cost = _run(0.01)
    # The first sample always runs; after it, the probe may run at most once per
    # cost / budget seconds. Counting runs, not seconds, holds however big the heap
    # (and so the probe's cost) is in this process.
    assert ran >= 1, "the probe must still run, just less often"
    assert ran <= 2 + wall * 0.01 / cost, (ran, wall, cost)
    # overhead/fraction is reported once its window (from the first sample) is 1 s long.
    assert reported is None


def test_without_budget_the_same_probe_costs_far_more():
    """The control: the budget is what keeps the fraction low."""
    ran, measured, *_ = _run(None, seconds=0.4)
    assert measured > 0.1, (ran, measured)
