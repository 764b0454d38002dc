"""Regression tests for issue 24, fault 1: with tracemalloc in windows (the RLlib
adapter's ``diagnose=True``), traced bytes are no series; the kind and the culprit come
from what the windows saw. Real leaks: numpy arrays the user keeps, a C ``malloc`` never
freed, called through ctypes from a helper module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import memprobe

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


def _run(tmp_path: Path, name: str, files: dict[str, str]) -> tuple[memprobe.Report, Path]:
    for fname, src in files.items():
        (tmp_path / fname).write_text(src)
    sys.path.insert(0, str(tmp_path))
    path = tmp_path / f"{name}.jsonl"
    try:
        mod = __import__(name)
        with memprobe.Prober(WINDOWED, load_entrypoints=False,
                             sink=memprobe.JsonlSink(path)) as prober:
            for i in range(150):
                mod.step()
                prober.sample(step=i)
            return prober.report(), path
    finally:
        sys.path.remove(str(tmp_path))
        for m in (name, "nativehelper"):
            sys.modules.pop(m, None)


def _report_text(path: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "memprobe", "report", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    return out.stdout


def test_windowed_numpy_leak_is_python_at_the_users_line(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    report, path = _run(tmp_path, "win_numpy", {"win_numpy.py": NUMPY_USER})
    rss = report.get("process/rss_bytes")
    assert rss is not None and rss.leaking
    assert rss.kind == "python", rss.describe()
    assert rss.culprits[0].split("/", 1)[1].startswith("win_numpy.py:4 → numpy/"), rss.culprits
    assert "tracemalloc windows" in rss.note  # what the kind rests on
    text = _report_text(path)
    assert "native memory" not in text
    assert "win_numpy.py:4 → numpy/" in text, text


def test_windowed_native_leak_is_native_with_the_way_to_its_stack(tmp_path: Path) -> None:
    report, path = _run(tmp_path, "win_native",
                        {"win_native.py": NATIVE_USER, "nativehelper.py": NATIVE_HELPER})
    rss = report.get("process/rss_bytes")
    assert rss is not None and rss.leaking
    assert rss.kind == "native", rss.describe()
    assert "tracemalloc windows" in rss.note and "native_traces" in rss.note, rss.note
    assert "native_traces" in _report_text(path)
