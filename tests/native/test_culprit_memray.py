"""Regression tests for issue 24, fault 4: where the memray probe ran, its sites feed the
verdict of a native leak and ``memprobe report`` (user line → library line → C function)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("memray")

PROBES = {"process": {}, "gc": {},
          "tracemalloc": {"window_steps": 1, "period_steps": 5},
          "memray": {"window_steps": 1, "period_steps": 5, "native_traces": True}}


RUNNER = """
import ctypes, json, sys
import memprobe
lib = ctypes.CDLL(sys.argv[1])
lib.leaky_alloc.restype = ctypes.c_void_p
lib.leaky_alloc.argtypes = [ctypes.c_size_t]
probes = json.loads(sys.argv[3])
kept = []
with memprobe.Prober(probes, load_entrypoints=False,
                     sink=memprobe.JsonlSink(sys.argv[2])) as prober:
    for i in range(120):
        kept.append(lib.leaky_alloc(64 * 1024))  # the user's line
        prober.sample(step=i)
    v = prober.report().get("process/rss_bytes")
print(json.dumps({"kind": v.kind, "culprits": list(v.culprits), "note": v.note}))
"""


def _run(leaklib, tmp_path: Path, probes: dict) -> tuple[dict, str]:
    """The program in a fresh interpreter (its rss is its own): the rss verdict, and
    ``memprobe report`` on its JSONL."""
    import json

    (tmp_path / "runner.py").write_text(RUNNER)
    path = tmp_path / "native.jsonl"
    out = subprocess.run([sys.executable, "runner.py", leaklib._name, str(path),
                          json.dumps(probes)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    report = subprocess.run([sys.executable, "-m", "memprobe", "report", str(path)],
                            capture_output=True, text=True, timeout=120).stdout
    return json.loads(out.stdout.strip().splitlines()[-1]), report


def test_native_leak_verdict_names_the_c_function_memray_saw(leaklib, tmp_path: Path) -> None:
    rss, out = _run(leaklib, tmp_path, PROBES)
    assert rss["kind"] == "native", rss
    assert rss["culprits"] and rss["culprits"][0].startswith("runner.py:12"), rss
    assert rss["culprits"][0].endswith(" → leaky_alloc"), rss
    assert "memray windows" in rss["note"]
    assert "→ leaky_alloc" in out, out
    assert "--probes process,gc,tracemalloc" not in out  # no advice to add tracemalloc


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
    probes = {"process": {}, "memray": {"window_steps": 1, "period_steps": 5,
                                        "native_traces": True}}
    rss, out = _run(leaklib, tmp_path, probes)
    assert rss["kind"] == "native", rss
    assert rss["culprits"][0].endswith(" → leaky_alloc"), rss
    assert "→ leaky_alloc" in out and "rerun with --probes" not in out, out


CLI_PROGRAM = """
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1])
lib.leaky_alloc.restype = ctypes.c_void_p
lib.leaky_alloc.argtypes = [ctypes.c_size_t]
kept = []
for i in range(800):  # samples enough for a verdict while memray's C stacks are read
    kept.append(lib.leaky_alloc(32 * 1024))
    time.sleep(0.01)
"""


def _memprobe_run(leaklib, tmp_path: Path, *options: str) -> dict:
    """``memprobe run`` on a native leak with the memray probe, then ``memprobe report
    --json``: the rss verdict."""
    import json

    (tmp_path / "prog.py").write_text(CLI_PROGRAM)
    run = subprocess.run([sys.executable, "-m", "memprobe", "run", "--probes",
                          "process,gc,memray", *options, "--interval", "0.01", "-o", "n.jsonl",
                          "prog.py", leaklib._name], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    report = subprocess.run([sys.executable, "-m", "memprobe", "report", "--json", "n.jsonl"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    (process,) = json.loads(report.stdout)["processes"]
    return next(m for m in process["metrics"] if m["metric"] == "process/rss_bytes")


def test_memprobe_run_names_its_own_flag_for_the_c_stack(leaklib, tmp_path: Path) -> None:
    """In a report on memprobe run's samples, the way to memray's C stacks is the command
    line's ``--probe-option``, not a Prober's ``probes={...}``; given, it names the C
    function."""
    rss = _memprobe_run(leaklib, tmp_path)
    assert rss["kind"] == "native", rss
    assert "memprobe run's --probe-option memray.native_traces=true names the C function" \
        in rss["note"], rss
    assert "probes={" not in rss["note"], rss
    rss = _memprobe_run(leaklib, tmp_path, "--probe-option", "memray.native_traces=true")
    assert rss["kind"] == "native" and rss["culprits"], rss
    assert rss["culprits"][0].endswith(" → leaky_alloc"), rss
    assert "--probe-option" not in rss["note"], rss
