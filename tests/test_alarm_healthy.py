"""Healthy programs the live alarm must not alarm on: a count of live objects that grows by
cyclic garbage awaiting the oldest generation's collection (rare in a large heap), which
the alarm confirms by one full collection first; an empty loop under a Prober whose
history is long. Real programs, the real collector."""

from __future__ import annotations

import gc

import pytest

import memprobe

KEPT: list[object] = []


@pytest.fixture(autouse=True)
def _kept_cleared():
    """KEPT emptied after each test."""
    yield
    KEPT.clear()


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


_EMPTY_LOOP = """
import memprobe
fired = []
prober = memprobe.Prober(on_leak=fired.append, capture_on_leak=False, history={history},
                         load_entrypoints=False)
for step in range(3000):
    prober.sample(step=step)
print([v.key for v in fired])
"""


@pytest.mark.parametrize("history", [1000, 3000])
def test_a_long_history_is_not_a_leak_of_an_empty_loop(history: int) -> None:
    """The checks read the latest 200 samples of the history (the tiers hold every scale):
    read whole, each check's working memory grew with the history as it filled, and the
    alarm took that for the program's growth (2.5 MiB over 1,000 samples)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _EMPTY_LOOP.format(history=history)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
