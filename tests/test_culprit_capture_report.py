"""Issue 24: with the cheap probes alone (process, gc), the kind and the culprit
``memprobe report`` gives rest on what the alarm's capture traced (blocks kept during
it, by site, against the resident growth), not on "add the tracemalloc probe". Real
leaks in a fresh interpreter: numpy arrays the user keeps, a C ``malloc`` never freed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_culprit_windows import NATIVE_HELPER

NUMPY_USER = "import numpy as np\nKEPT = []\ndef step():\n    KEPT.append(np.ones(4096))\n"
NATIVE_USER = ("import nativehelper\nKEPT = []\ndef step():\n"
               "    KEPT.append(nativehelper.make_buffer(32768))\n")

# 400 samples 5 ms apart: the alarm fires at its second check (sample 100), its capture
# traces for 1 s and closes at the first sample after.
RUNNER = """
import sys, time
import memprobe
mod = __import__(sys.argv[1])
fired = []
with memprobe.Prober(["process", "gc"], load_entrypoints=False, on_leak=fired.append,
                     capture_on_leak={"duration_seconds": 1.0},
                     sink=memprobe.JsonlSink(sys.argv[2])) as prober:
    for i in range(int(sys.argv[3])):
        mod.step()
        prober.sample(step=i)
        time.sleep(float(sys.argv[4]))
assert fired, "the alarm did not fire"
"""


def _report(tmp_path: Path, name: str, files: dict[str, str], samples: int = 400,
            sleep_seconds: float = 0.005) -> dict:
    for fname, src in files.items():
        (tmp_path / fname).write_text(src)
    (tmp_path / "runner.py").write_text(RUNNER)
    path = tmp_path / f"{name}.jsonl"
    out = subprocess.run([sys.executable, "runner.py", name, str(path), str(samples),
                          str(sleep_seconds)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rep = subprocess.run([sys.executable, "-m", "memprobe", "report", "--json", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert rep.returncode in (0, 1), rep.stderr
    proc = json.loads(rep.stdout)["processes"][0]
    assert any("capture/" in k for k in path.read_text().split('"')), "no capture line"
    return next(m for m in proc["metrics"] if m["metric"] == "process/rss_bytes")


def test_numpy_leak_with_cheap_probes_is_python_at_the_users_line(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    rss = _report(tmp_path, "cap_numpy", {"cap_numpy.py": NUMPY_USER})
    assert rss["leak"] and rss["kind"] == "python", rss
    assert rss["culprits"][0].startswith("cap_numpy.py:4 → numpy/"), rss
    assert "the alarm's capture" in rss["note"], rss  # what the kind rests on


def test_the_capture_tells_the_kind_after_it_left_the_latest_samples(tmp_path: Path) -> None:
    """The run goes on for more than the 1,000 latest samples a report judges the sites
    on after its alarm: the capture line is older than all of them, and its kind and
    culprit are still the report's (they were "add the tracemalloc, objects or malloc
    probe" once it had left them)."""
    pytest.importorskip("numpy")
    rss = _report(tmp_path, "cap_numpy", {"cap_numpy.py": NUMPY_USER}, samples=1500,
                  sleep_seconds=0.001)
    assert rss["leak"] and rss["kind"] == "python", rss
    assert rss["culprits"][0].startswith("cap_numpy.py:4 → numpy/"), rss
    assert "the alarm's capture" in rss["note"], rss


def test_native_leak_with_cheap_probes_is_native(tmp_path: Path) -> None:
    rss = _report(tmp_path, "cap_native", {"cap_native.py": NATIVE_USER,
                                           "nativehelper.py": NATIVE_HELPER})
    assert rss["leak"] and rss["kind"] == "native", rss
    assert "the alarm's capture" in rss["note"], rss
