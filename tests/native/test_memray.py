"""The ``memray`` probe on real native leaks: a C library the tests compile, called via ctypes."""

from __future__ import annotations

import glob
import inspect
import os
import sys
import tempfile

import pytest

import memprobe
from memprobe.probes.memray import MemrayProbe, MemrayWindow

memray = pytest.importorskip("memray")

KiB = 1 << 10


def _line() -> int:
    """The line number of the caller's current line."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def _captures() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), f"memprobe-memray-{os.getpid()}-*")))


def _sites(values: dict, prefix: str = "memprobe/memray/top/") -> dict[str, int]:
    return {k[len(prefix):-len("/size_bytes")]: v for k, v in values.items()
            if k.startswith(prefix) and k.endswith("/size_bytes")}


def test_names_the_python_line_that_called_a_leaking_c_function(leaklib):
    kept: list[int] = []
    files = _captures()
    prober = memprobe.Prober(probes={"memray": {"window_steps": 2, "period_steps": 4}},
                             load_entrypoints=False).start()
    try:
        closed = []
        for _ in range(8):
            kept.append(leaklib.leaky_alloc(256 * KiB)); line = _line()  # noqa: E702
            leaklib.scratch_alloc(512 * KiB)  # freed at once: must not be reported
            values = prober.sample(force=True)
            if "memprobe/memray/window_seconds" in values:
                closed.append(values)
    finally:
        prober.stop()
        for p in kept:
            leaklib.release(p)
    assert len(closed) == 2  # samples 2 and 6 close the windows opened at 0 and 4
    site = f"tests/native/test_memray.py:{line}"
    for values in closed:
        sites = _sites(values)
        # two leaky_alloc calls fall inside each window (after samples k*4 and k*4+1)
        # (plus the few bytes the list append and the frame object take on that line)
        assert 2 * 256 * KiB <= sites.get(site, 0) < 2 * 256 * KiB + 64 * KiB, sites
        top = max(sites, key=sites.get)
        assert top == site
        assert values["memprobe/memray/survivors_bytes"] >= 2 * 256 * KiB
        assert values["memprobe/memray/window_active"] == 0
    assert not any("scratch" in s for v in closed for s in _sites(v))
    assert _captures() == files  # capture files are deleted


def test_native_traces_name_the_c_function_inside_the_compiled_library(leaklib):
    window = MemrayWindow(native_traces=True)
    window.open()
    try:
        kept = [leaklib.leaky_alloc(300 * KiB) for _ in range(3)]; line = _line()  # noqa: E702
    finally:
        sites = window.close()
    for p in kept:
        leaklib.release(p)
    by_site = {s.site: s for s in sites}
    site = f"tests/native/test_memray.py:{line}--leaky_alloc"
    assert site in by_site, by_site
    assert by_site[site].size_bytes == 3 * 300 * KiB  # the C function's mallocs alone
    assert by_site[site].count == 3
    assert sites[0].site == site  # the largest


def test_allocations_freed_before_the_window_ends_are_not_reported(leaklib):
    window = MemrayWindow()
    window.open()
    p = leaklib.leaky_alloc(1024 * KiB)
    leaklib.release(p)
    sites = window.close()
    assert sum(s.size_bytes for s in sites) < 64 * KiB, sites


def test_memprobe_own_allocations_are_left_out(leaklib):
    prober = memprobe.Prober(probes={"memray": {"window_steps": 1, "period_steps": 2}},
                             load_entrypoints=False).start()
    try:
        prober.sample(force=True)
        values = prober.sample(force=True)  # nothing allocated by the test in between
    finally:
        prober.stop()
    assert not any("memprobe/" in site for site in _sites(values)), _sites(values)


def test_keep_dir_keeps_a_capture_memray_can_open(leaklib, tmp_path):
    window = MemrayWindow(keep_dir=str(tmp_path))
    window.open()
    kept = leaklib.leaky_alloc(128 * KiB)
    window.close()
    leaklib.release(kept)
    (capture,) = tmp_path.glob("memprobe-memray-*.bin")
    with memray.FileReader(str(capture)) as reader:
        assert sum(r.size for r in reader.get_leaked_allocation_records()) >= 128 * KiB


def test_another_tracker_running_is_a_clear_probe_error(tmp_path):
    with memray.Tracker(str(tmp_path / "theirs.bin")):
        window = MemrayWindow()
        with pytest.raises(memprobe.ProbeError, match="cannot open a tracking window: "
                           "No more than one Tracker"):
            window.open()
    assert not window.active


def test_stop_mid_window_ends_tracking_and_removes_the_capture():
    files = _captures()
    probe = MemrayProbe(window_steps=1, period_steps=3)
    probe.start()
    probe.sample()
    assert probe._window is not None and probe._window.active
    probe.stop()
    assert probe._window is None
    assert _captures() == files
    # memray tracks nothing now: a fresh tracker may start
    window = MemrayWindow()
    window.open()
    window.close()


@pytest.mark.parametrize(("opts", "option"), [
    ({"window_steps": 0}, "memray.window_steps"),
    ({"window_steps": 5, "period_steps": 5}, "memray.window_steps"),
    ({"top": True}, "memray.top"),
    ({"native_traces": "yes"}, "memray.native_traces"),
    ({"keep_dir": "/no/such/dir"}, "memray.keep_dir"),
])
def test_bad_options_name_the_option(opts, option):
    with pytest.raises(memprobe.ConfigError, match=rf"^{option}: "):
        MemrayProbe(**opts)


def test_without_memray_the_probe_is_disabled_with_one_warning(monkeypatch):
    monkeypatch.setitem(sys.modules, "memray", None)  # import memray raises ImportError
    prober = memprobe.Prober(probes=["memray"], load_entrypoints=False)
    with pytest.warns(memprobe.ProbeFailedWarning, match=r"memray is not installed: "
                      r"pip install 'pymemprobe\[native\]'"):
        prober.start()
    try:
        values = prober.sample(force=True)
        assert not any(k.startswith("memprobe/memray/") for k in values)
    finally:
        prober.stop()


def test_a_forked_child_leaves_the_parents_window_alone(leaklib):
    window = MemrayWindow()
    window.open()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if window.close() == [] and not window.active else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    kept = leaklib.leaky_alloc(64 * KiB)
    sites = window.close()  # the parent's window still tracks and reads its file
    leaklib.release(kept)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sum(s.size_bytes for s in sites) >= 64 * KiB
