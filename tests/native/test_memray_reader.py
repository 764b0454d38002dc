"""Issue 24, native stacks in RLlib: naming the C functions of a memray window loads the
symbols of every library mapped, some 350 MiB with torch; read in the process probed,
they stayed in its resident size, which memprobe then judged as the user's leak (an
EnvRunner's rss jumped by 776 MiB at the window's close and its verdict was lost).
The window is read in a child interpreter; the sites are the same."""

from __future__ import annotations

import psutil
import pytest

from memprobe.probes.memray import MemrayWindow, read_sites_apart

pytest.importorskip("memray")
MiB = 1 << 20


def test_naming_c_functions_leaves_no_memory_in_the_probed_process() -> None:
    torch = pytest.importorskip("torch")
    kept = []
    window = MemrayWindow(native_traces=True)
    window.open()
    for _ in range(20):
        kept.append(torch.ones(1024))  # 4 KiB of storage each, from c10's allocator
    rss = psutil.Process().memory_info().rss
    sites = window.close()
    grown = psutil.Process().memory_info().rss - rss
    assert grown < 32 * MiB, f"closing the window grew rss by {grown / MiB:.0f} MiB"
    named = [s for s in sites if "test_memray_reader.py:" in s.site and "alloc_cpu" in s.site]
    assert named and named[0].size_bytes >= 20 * 4096, sites[:5]


def test_a_capture_file_that_cannot_be_read_says_which(tmp_path) -> None:
    from memprobe import ProbeError

    bad = tmp_path / "not-a-capture.bin"
    bad.write_bytes(b"nothing memray wrote")
    with pytest.raises(ProbeError, match=r"not-a-capture\.bin"):
        read_sites_apart(str(bad), native=True)


def test_live_culprit_keys_get_the_c_stack_once_a_memray_window_closes(leaklib) -> None:
    """The RLlib adapter's live keys: the alarm fires (culprit ``native``, no stack yet)
    before the first memray window closes, as in an EnvRunner whose overhead budget
    kept the window open for 140 samples. The window's C stack then replaces
    ``native``: the user's line → the C function."""
    pytest.importorskip("ray.rllib")
    import inspect
    import warnings

    import memprobe
    from memprobe_rllib._leak import LeakState

    leak = LeakState("memprobe", "env_runner", 1, "a sample at each episode end")
    prober = memprobe.Prober(
        probes={"process": {}, "memray": {"window_steps": 100, "period_steps": 400,
                                          "native_traces": True}},
        on_leak=leak.on_leak, capture_on_leak=False, load_entrypoints=False,
        leak_check_every=10)
    prober.alarm.evidence_samples = 10
    leak.prober = prober
    kept, at_alarm = [], None
    line = inspect.currentframe().f_lineno + 6
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prober.start()
            for i in range(160):
                kept.append(leaklib.leaky_alloc(256 * 1024))
                prober.sample(step=i, force=True)
                names = {k for k, v in leak.values(prober.history[-1].values).items()
                         if "/culprit/" in k and v > 0}
                if names and at_alarm is None:
                    at_alarm = (i, names)
    finally:
        prober.stop()
        for p in kept:
            leaklib.release(p)
    assert at_alarm is not None and at_alarm[0] < 100, at_alarm  # before the window closed
    assert at_alarm[1] == {"memprobe/leak/culprit/native/rate_per_hour"}, at_alarm
    assert any(f"test_memray_reader.py:{line}" in n and "leaky_alloc" in n for n in names), names
    assert "memprobe/leak/culprit/native/rate_per_hour" not in names, names
