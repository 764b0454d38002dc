"""A count of live objects that grows by cyclic garbage awaiting the oldest generation's
collection (rare in a large heap) is not a leak: the alarm confirms such a growth by one
full collection before it alarms. Real programs, the real collector."""

from __future__ import annotations

import gc

import pytest

import memprobe

KEPT: list[object] = []


@pytest.fixture
def rare_full_collections():
    """The oldest generation collected never by itself, as in a heap of millions of
    objects; young ones as usual."""
    old = gc.get_threshold()
    gc.collect()
    gc.set_threshold(old[0], old[1], 10**9)
    yield
    gc.set_threshold(*old)
    KEPT.clear()
    gc.collect()


def _cycles(n: int) -> None:
    """``n`` reference cycles, dropped: garbage only a collection frees."""
    for _ in range(n):
        a: list[object] = []
        b = {"a": a}
        a.append(b)


def _run(step_fn, steps: int = 1500) -> list[memprobe.Verdict]:
    fired: list[memprobe.Verdict] = []
    prober = memprobe.Prober(probes={"gc": {"blocks": True}}, on_leak=fired.append,
                             leak_check_every=20, load_entrypoints=False,
                             capture_on_leak=False, history=200)
    with prober:
        for step in range(steps):
            step_fn()
            prober.sample(step)
    return fired


@pytest.mark.usefixtures("rare_full_collections")
def test_garbage_awaiting_a_full_collection_does_not_alarm() -> None:
    fired = _run(lambda: _cycles(20))
    assert not [v for v in fired if v.metric == "gc/allocated_blocks"], fired


@pytest.mark.usefixtures("rare_full_collections")
def test_objects_kept_alarm_after_the_collection_that_confirms_them() -> None:
    def keep() -> None:
        _cycles(20)
        KEPT.extend([{"n": i}] for i in range(20))

    fired = _run(keep)
    assert [v for v in fired if v.metric == "gc/allocated_blocks"], fired


def test_a_program_that_turned_the_collector_off_keeps_its_garbage() -> None:
    """With ``gc.disable()`` garbage is memory the program keeps for good: no collection
    is made for it, and it alarms."""
    gc.disable()
    try:
        fired = _run(lambda: _cycles(20))
    finally:
        gc.enable()
        gc.collect()
    assert [v for v in fired if v.metric == "gc/allocated_blocks"], fired
