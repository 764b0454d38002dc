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


_LATER_PROGRAM = """\
import ctypes, json, sys, warnings
import memprobe
from memprobe_rllib._leak import LeakState
lib = ctypes.CDLL(sys.argv[1])
lib.leaky_alloc.restype = ctypes.c_void_p
lib.leaky_alloc.argtypes = [ctypes.c_size_t]
leak = LeakState("memprobe", "env_runner", 1, "a sample at each episode end")
prober = memprobe.Prober(
    probes={"process": {}, "memray": {"window_steps": 100, "period_steps": 400,
                                      "native_traces": True}},
    on_leak=leak.on_leak, capture_on_leak=False, load_entrypoints=False,
    leak_check_every=10)
prober.alarm.evidence_samples = 10
leak.prober = prober
at_alarm = None
warnings.simplefilter("ignore")
prober.start()
for i in range(160):
    lib.leaky_alloc(256 * 1024)  # the leaking line
    prober.sample(step=i, force=True)
    names = sorted(k for k, v in leak.values(prober.history[-1].values).items()
                   if "/culprit/" in k and v > 0)
    if names and at_alarm is None:
        at_alarm = [i, names]
prober.stop()
print(json.dumps({"at_alarm": at_alarm, "names": names}))
"""


def _run(program: str, leaklib, tmp_path) -> dict:
    """``program`` in a fresh interpreter (the heap other tests freed would serve its
    leak, rss flat), with the C library's path; its last line, as JSON."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "keepnative.py").write_text(program)
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "keepnative.py", leaklib._name], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": path})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _line(program: str) -> int:
    return program.splitlines().index("    lib.leaky_alloc(256 * 1024)  # the leaking line") + 1


def test_live_culprit_keys_get_the_c_stack_once_a_memray_window_closes(leaklib,
                                                                       tmp_path) -> None:
    """The RLlib adapter's live keys: the alarm fires (culprit ``native``, no stack yet)
    before the first memray window closes, as in an EnvRunner whose overhead budget
    kept the window open for 140 samples. The window's C stack then replaces
    ``native``: the user's line → the C function."""
    pytest.importorskip("ray.rllib")
    got = _run(_LATER_PROGRAM, leaklib, tmp_path)
    at_alarm, names = got["at_alarm"], got["names"]
    assert at_alarm is not None and at_alarm[0] < 100, got  # before the window closed
    assert at_alarm[1] == ["memprobe/leak/culprit/native/rate_per_hour"], got
    line = _line(_LATER_PROGRAM)
    assert any(f"keepnative.py:{line}" in n and "leaky_alloc" in n for n in names), got
    assert "memprobe/leak/culprit/native/rate_per_hour" not in names, got


_HISTORY_PROGRAM = """\
import ctypes, json, sys, warnings
from memprobe_rllib import CallbackOptions
from memprobe_rllib._process import ProcessProber
lib = ctypes.CDLL(sys.argv[1])
lib.leaky_alloc.restype = ctypes.c_void_p
lib.leaky_alloc.argtypes = [ctypes.c_size_t]
options = CallbackOptions(
    probes={"process": {}, "memray": {"window_steps": 1, "period_steps": 1000,
                                       "native_traces": True}},
    history=30, leak_check_every=10, load_entrypoints=False)
pp = ProcessProber(options, "env_runner", 1, prefix="memprobe", step_name="a test step")
warnings.simplefilter("ignore")
pp.start()
pp.prober.alarm.evidence_samples = 10
for i in range(200):
    lib.leaky_alloc(256 * 1024)  # the leaking line
    pp.sample(i, force=True)
names = [k for k, v in pp.leak.values(pp.prober.history[-1].values).items()
         if "/culprit/" in k and v > 0]
pp.prober.stop()
print(json.dumps({"alarmed": list(pp.leak.alarmed), "names": names}))
"""


def test_live_culprit_keys_get_a_c_stack_whose_window_left_the_history(leaklib,
                                                                        tmp_path) -> None:
    """The adapter's process: its one memray window closed at the second sample (the
    overhead budget spaced the next ones out), long out of its 30-sample history when
    the alarm fires; the stack that window saw surviving still names the leak."""
    pytest.importorskip("ray.rllib")
    got = _run(_HISTORY_PROGRAM, leaklib, tmp_path)
    assert got["alarmed"], got
    line = _line(_HISTORY_PROGRAM)
    assert any(f"keepnative.py:{line}" in n and "leaky_alloc" in n for n in got["names"]), got
    assert "memprobe/leak/culprit/native/rate_per_hour" not in got["names"], got
