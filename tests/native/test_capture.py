"""Deep capture: culprits named by windows opened when the leak alarm fires."""

from __future__ import annotations

import gc
import inspect
import time
import tracemalloc

import pytest

import memprobe
from memprobe.capture import CulpritCapture, capture_culprits

MiB = 1 << 20

#: These tests judge this process's rss: its allocations must fault in new pages.
pytestmark = pytest.mark.usefixtures("fresh_heap")


class Session:
    """What the leak retains: one per step, each with a 64 KiB buffer."""

    def __init__(self) -> None:
        self.buf = bytearray(64 * 1024)


LEAKED: list[Session] = []


@pytest.fixture(autouse=True)
def _clear():
    yield
    LEAKED.clear()


def _line() -> int:
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def _cheap_step() -> int:
    return sum([i for i in range(50)])


def test_alarm_triggered_capture_names_a_leak_that_starts_midway():
    """A long run on the cheap process probe; a leak starts at step 1500; the alarm
    (a real Prober leak check) opens a capture; the capture names the line, the type
    and the holder."""
    # A loaded box walks referrers slowly.
    capture = CulpritCapture(duration_seconds=0.3, holders_timeout_seconds=60)
    alarms = []

    def on_leak(verdict):
        alarms.append((step, verdict.key))
        capture.start()

    for _ in range(2000):  # the interpreter's own warm-up, before measuring
        _cheap_step()
    prober = memprobe.Prober(probes=["process"], on_leak=on_leak, leak_check_every=50,
                             load_entrypoints=False,
                             leak_options={"threshold_per_step": 16384},
                             capture_on_leak=False).start()  # this test opens its own
    result = None
    try:
        for step in range(4000):
            _cheap_step()
            if step >= 1500:
                LEAKED.append(Session()); line = _line()  # noqa: E702
            prober.sample(step)
            if capture.due():
                result = capture.finish()
                break
    finally:
        prober.stop()
        capture.abandon()
    assert alarms, "the alarm never fired"
    assert alarms[0][0] >= 1500, f"false alarm before the leak started: {alarms}"
    assert result is not None
    site = f"tests/native/test_capture.py:{line}"
    # Session.__init__ allocates the buffer; the line that creates the Session holds
    # the instance and its __dict__.
    assert result.python_sites[0][0] == "tests/native/test_capture.py:" + str(
        inspect.getsourcelines(Session.__init__)[1] + 1), result.python_sites
    assert any(s == site for s, _, _ in result.python_sites), result.python_sites
    assert result.types[0][0] in (f"{__name__}.Session",) or any(
        t == f"{__name__}.Session" for t, _ in result.types), result.types
    assert result.holders and all(
        c.root == f"module {__name__} global 'LEAKED'" for c in result.holders
    ), [str(c) for c in result.holders]
    assert result.duration_seconds >= 0.3
    sections = result.sections()
    assert any(k.endswith("size_bytes") for s in sections["tracemalloc"]["survivors"].values()
               for k in s)
    assert not tracemalloc.is_tracing()  # the capture released what it started


def test_capture_culprits_runs_a_workload_for_its_duration():
    def workload():
        LEAKED.append(Session())

    t0 = time.perf_counter()
    result = capture_culprits(0.2, workload, native=False, holders_timeout_seconds=60)
    assert 0.2 <= time.perf_counter() - t0 < 60.0
    assert result.python_sites and result.python_sites[0][1] >= 64 * 1024
    assert f"{__name__}.Session" in dict(result.types)
    assert "held by:" in result.describe()
    assert result.to_dict()["holders"][0].endswith(f"module {__name__} global 'LEAKED'")


def test_memory_bound_closes_the_capture_early():
    capture = CulpritCapture(duration_seconds=60, max_overhead_bytes=1 << 20, native=False,
                             objects=False).start()
    try:
        junk = []
        t0 = time.perf_counter()
        while not capture.due():
            junk.append([object() for _ in range(1000)])
            assert time.perf_counter() - t0 < 30
        result = capture.finish()
    finally:
        capture.abandon()
    del junk
    assert result.duration_seconds < 30
    assert any("closed early" in n for n in result.notes)


def test_with_tracing_already_on_the_culprits_are_growth_from_a_baseline():
    tracemalloc.start()
    try:
        before = [bytearray(10000) for _ in range(50)]  # traced, but not new
        result = capture_culprits(0.1, lambda: LEAKED.append(Session()), native=False,
                                  objects=False)
        assert tracemalloc.is_tracing()  # the user's tracing is left on
    finally:
        tracemalloc.stop()
    del before
    sites = dict((s, b) for s, b, _ in result.python_sites)
    assert not any(str(_BEFORE_LINE) in s for s in sites)
    assert max(sites.values()) >= 64 * 1024


_BEFORE_LINE = inspect.getsourcelines(
    test_with_tracing_already_on_the_culprits_are_growth_from_a_baseline)[1] + 3


def test_native_sites_when_memray_is_installed(leaklib):
    pytest.importorskip("memray")
    kept: list[int] = []

    def workload():
        kept.append(leaklib.leaky_alloc(100 * 1024))
        time.sleep(0.01)

    try:
        result = capture_culprits(0.2, workload, native=True, native_traces=True,
                                  objects=False)
    finally:
        for p in kept:
            leaklib.release(p)
    assert result.native_sites, result
    top = result.native_sites[0]
    assert top.site.startswith("tests/native/test_capture.py:")
    assert top.site.endswith("--leaky_alloc")
    assert top.size_bytes >= 100 * 1024
    assert "memray" in result.sections()


def test_finish_before_start_and_bad_options_are_clear():
    with pytest.raises(memprobe.ProbeError, match=r"finish\(\) called before start"):
        CulpritCapture().finish()
    with pytest.raises(memprobe.ConfigError, match=r"^capture.duration_seconds: "):
        CulpritCapture(duration_seconds=0)
    with pytest.raises(memprobe.ConfigError, match=r"^capture.native: "):
        CulpritCapture(native="auto")  # type: ignore[arg-type]
    gc.collect()


class _Kept:
    pass


def test_a_capture_outside_the_main_thread_never_walks_the_heap():
    """A sampler thread (memprobe_ray's, the CLI's) opens the capture: it counts no
    objects and walks no holders, and says so. A heap walk from another thread holds a
    reference to the main thread's half-built tuples, and CPython then raises
    ``SystemError: bad argument to internal function`` in the user's code."""
    import threading

    kept = []
    result = {}

    def in_thread():
        capture = CulpritCapture(duration_seconds=0.05, native=False).start()
        kept.extend(_Kept() for _ in range(200))
        result["culprits"] = capture.finish()

    t = threading.Thread(target=in_thread)
    t.start()
    t.join(60)
    culprits = result["culprits"]
    assert culprits.types == () and culprits.holders == (), culprits
    assert any("outside the main thread" in n for n in culprits.notes), culprits.notes
    # The same capture in the main thread does count the objects kept.
    capture = CulpritCapture(duration_seconds=0.05, native=False).start()
    kept.extend(_Kept() for _ in range(200))
    culprits = capture.finish()
    assert any("_Kept" in t for t, _ in culprits.types), culprits.types
