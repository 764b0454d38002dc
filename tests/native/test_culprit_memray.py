"""Regression tests for issue 24, fault 4: where the memray probe ran, its sites feed the
verdict of a native leak and ``memprobe report`` (user line → library line → C function)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import memprobe


#: These tests judge this process's rss: its allocations must fault in new pages.
pytestmark = pytest.mark.usefixtures("fresh_heap")

pytest.importorskip("memray")

PROBES = {"process": {}, "gc": {},
          "tracemalloc": {"window_steps": 1, "period_steps": 5},
          "memray": {"window_steps": 1, "period_steps": 5, "native_traces": True}}


def test_native_leak_verdict_names_the_c_function_memray_saw(leaklib, tmp_path: Path) -> None:
    path = tmp_path / "native.jsonl"
    kept = []

    def step() -> None:
        kept.append(leaklib.leaky_alloc(64 * 1024))  # the user's line

    with memprobe.Prober(PROBES, load_entrypoints=False,
                         sink=memprobe.JsonlSink(path)) as prober:
        for i in range(120):
            step()
            prober.sample(step=i)
        report = prober.report()
    for p in kept:
        leaklib.release(p)
    rss = report.get("process/rss_bytes")
    assert rss is not None and rss.leaking and rss.kind == "native", str(report)
    assert rss.culprits and "test_culprit_memray.py:" in rss.culprits[0]
    assert rss.culprits[0].endswith(" → leaky_alloc"), rss.culprits
    assert "memray windows" in rss.note
    out = subprocess.run([sys.executable, "-m", "memprobe", "report", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert "→ leaky_alloc" in out.stdout, out.stdout
    assert "--probes process,gc,tracemalloc" not in out.stdout  # no advice to add tracemalloc


def test_memray_site_puts_the_users_line_before_the_library_line(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    (tmp_path / "np_user.py").write_text(
        "import numpy as np\nKEPT = []\ndef step():\n    KEPT.append(np.ones(1 << 16))\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import np_user  # type: ignore[import-not-found]

        from memprobe.capture import capture_culprits

        culprits = capture_culprits(0.5, np_user.step, native=True, objects=False,
                                    holders=False)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("np_user", None)
    del np
    native = [s.site for s in culprits.native_sites]
    assert any(s.split("/", 1)[-1].startswith("np_user.py:4--numpy/") for s in native), native
    python = [s for s, _, _ in culprits.python_sites]
    assert any("np_user.py:4--numpy/" in s for s in python), python


def test_process_and_memray_alone_name_the_c_function(leaklib, tmp_path: Path) -> None:
    """``--probes process,memray``: memray's sites feed the verdict; no advice to add
    tracemalloc."""
    path = tmp_path / "memray_only.jsonl"
    kept = []
    probes = {"process": {}, "memray": {"window_steps": 1, "period_steps": 5,
                                        "native_traces": True}}
    with memprobe.Prober(probes, load_entrypoints=False,
                         sink=memprobe.JsonlSink(path)) as prober:
        for i in range(120):
            kept.append(leaklib.leaky_alloc(64 * 1024))
            prober.sample(step=i)
        report = prober.report()
    for p in kept:
        leaklib.release(p)
    rss = report.get("process/rss_bytes")
    assert rss is not None and rss.kind == "native", str(report)
    assert rss.culprits[0].endswith(" → leaky_alloc"), rss.culprits
    out = subprocess.run([sys.executable, "-m", "memprobe", "report", str(path)],
                         capture_output=True, text=True, timeout=120).stdout
    assert "→ leaky_alloc" in out and "rerun with --probes" not in out, out
