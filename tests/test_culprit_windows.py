"""Regression tests for issue 24, fault 1: with tracemalloc in windows (the RLlib
adapter's ``diagnose=True``), traced bytes are no series; the kind and the culprit come
from what the windows saw. Real leaks: numpy arrays the user keeps, a C ``malloc`` never
freed, called through ctypes from a helper module."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

NUMPY_USER = "import numpy as np\nKEPT = []\ndef step():\n    KEPT.append(np.ones(4096))\n"
NATIVE_HELPER = """\
import ctypes, ctypes.util
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
def make_buffer(n):
    p = _libc.malloc(n)
    _libc.memset(p, 1, n)
    return p
"""
NATIVE_USER = "import nativehelper\nKEPT = []\ndef step():\n    KEPT.append(nativehelper.make_buffer(32768))\n"

WINDOWED = {"process": {}, "gc": {},
            "tracemalloc": {"window_steps": 1, "period_steps": 5, "top": 10}}


RUNNER = """
import json, sys
import memprobe
mod = __import__(sys.argv[1])
probes = {probes!r}
with memprobe.Prober(probes, load_entrypoints=False,
                     sink=memprobe.JsonlSink(sys.argv[2])) as prober:
    for i in range(150):
        mod.step()
        prober.sample(step=i)
    report = prober.report()
    v = report.get("process/rss_bytes")
print(json.dumps({{"status": v.status, "kind": v.kind, "culprits": list(v.culprits),
                  "note": v.note, "judged": sorted(report.verdicts)}}))
"""


def _run(tmp_path: Path, name: str, files: dict[str, str]) -> tuple[dict, Path]:
    """Run the program in a fresh interpreter (its rss is its own); the rss verdict."""
    for fname, src in files.items():
        (tmp_path / fname).write_text(src)
    (tmp_path / "runner.py").write_text(RUNNER.format(probes=WINDOWED))
    path = tmp_path / f"{name}.jsonl"
    out = subprocess.run([sys.executable, "runner.py", name, str(path)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), path


def _report_text(path: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "memprobe", "report", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    return out.stdout


def test_windowed_numpy_leak_is_python_at_the_users_line(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    rss, path = _run(tmp_path, "win_numpy", {"win_numpy.py": NUMPY_USER})
    assert rss["status"] == "leak" and rss["kind"] == "python", rss
    assert rss["culprits"][0].startswith("win_numpy.py:4 → numpy/"), rss
    assert "tracemalloc windows" in rss["note"]  # what the kind rests on
    # Traced bytes read in windows are no series: prober.report() does not judge them
    # (it said "ok" from the Prober's tiers), as memprobe report does not.
    assert "memprobe/tracemalloc/traced_bytes" not in rss["judged"], rss["judged"]
    text = _report_text(path)
    assert "native memory" not in text
    assert "win_numpy.py:4 → numpy/" in text, text


def test_windowed_native_leak_is_native_with_the_way_to_its_stack(tmp_path: Path) -> None:
    rss, path = _run(tmp_path, "win_native",
                     {"win_native.py": NATIVE_USER, "nativehelper.py": NATIVE_HELPER})
    assert rss["status"] == "leak" and rss["kind"] == "native", rss
    assert "tracemalloc windows" in rss["note"] and "native_traces" in rss["note"], rss
    assert "native_traces" in _report_text(path)


def test_a_sliver_alive_as_the_window_closed_is_no_culprit() -> None:
    """The loop's counter at the ``for`` line is alive when each window closes (28 B of
    the 4 KiB per step that survive): the window names the leaking line only."""
    from memprobe.leak._windows import window_evidence

    closes = [100.0, 200.0, 300.0]
    times = [0.0, 1.0, 2.0]
    series = {
        "memprobe/tracemalloc/survivors_bytes": (closes, [40960.0] * 3, times),
        "memprobe/tracemalloc/window_active": ([90.0, 100.0], [1.0, 0.0], [0.0, 0.1]),
        "memprobe/tracemalloc/survivors/helper.py:7/size_bytes": (closes, [40900.0] * 3, times),
        "memprobe/tracemalloc/survivors/app.py:13/size_bytes": (closes, [28.0] * 3, times),
    }
    ev = window_evidence(series, "memprobe")
    assert ev is not None and [s for s, _ in ev.sites] == ["helper.py:7"], ev
    assert "from 3 tracemalloc windows: 4" in ev.describe(4096.0), ev.describe(4096.0)
