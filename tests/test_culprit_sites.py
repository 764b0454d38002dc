"""Regression tests for issue 24: by default a Prober's tracemalloc probe, its report and
``memprobe report`` name the user's line first when a library allocated what the
user keeps (numpy, the json and pickle decoders, a stdlib factory)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import memprobe


#: These tests judge this process's rss: its allocations must fault in new pages.
pytestmark = pytest.mark.usefixtures("fresh_heap")
from memprobe import ConfigError

PROGRAMS = {
    # what the user's line keeps, made by a library: (module source, library prefix)
    "numpy": ("import numpy as np\nKEPT = []\ndef step():\n    KEPT.append(np.ones(4096))\n",
              "numpy/"),
    "json": ("import json\nKEPT = []\nDOC = json.dumps([f'item {i}' for i in range(300)])\n"
             "def step():\n    KEPT.append(json.loads(DOC))\n", "json/"),
    "etree": ("import xml.etree.ElementTree as ET\nKEPT = []\n"
              "DOC = '<r>' + '<i a=\"1\">x</i>' * 100 + '</r>'\n"
              "def step():\n    KEPT.append(ET.fromstring(DOC))\n", "xml/"),
}


def _module(tmp_path: Path, name: str) -> tuple[object, int]:
    """Import the program as the user's module ``user_<name>``; the line that keeps."""
    src, _ = PROGRAMS[name]
    path = tmp_path / f"user_{name}.py"
    path.write_text(src)
    sys.path.insert(0, str(tmp_path))
    try:
        mod = __import__(f"user_{name}")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(f"user_{name}", None)
    return mod, src.count("\n")  # the keeping line is the last


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_prober_default_names_the_users_line_first(tmp_path: Path, name: str) -> None:
    pytest.importorskip("numpy")
    mod, line = _module(tmp_path, name)
    path = tmp_path / "run.jsonl"
    with memprobe.Prober(["process", "gc", "tracemalloc"], load_entrypoints=False,
                         sink=memprobe.JsonlSink(path)) as prober:
        for i in range(80):
            mod.step()  # type: ignore[attr-defined]
            prober.sample(step=i)
        report = prober.report()
    want = f"user_{name}.py:{line} → {PROGRAMS[name][1]}"
    assert report.culprits and want in report.culprits[0], report.culprits
    assert report.culprit is not None and want in report.culprit, str(report)
    # memprobe report on the same samples
    out = subprocess.run([sys.executable, "-m", "memprobe", "report", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    assert want in out.stdout, out.stdout


def test_user_grouping_with_one_frame_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"tracemalloc\.nframe.*nframe >= 2"):
        memprobe.Prober({"tracemalloc": {"group_by": "user", "nframe": 1}},
                        load_entrypoints=False)
    # the allocating line alone stays available
    memprobe.Prober({"tracemalloc": {"group_by": "lineno", "nframe": 1}},
                    load_entrypoints=False)


def test_a_library_line_without_the_users_frame_says_so(tmp_path: Path) -> None:
    """Traced with 2 frames, ``json.loads`` keeps the user's line out of reach: the verdict
    names json's line and says why the user's is missing, never silently."""
    mod, _line = _module(tmp_path, "json")
    with memprobe.Prober({"process": {}, "tracemalloc": {"nframe": 2}},
                         load_entrypoints=False) as prober:
        for i in range(80):
            mod.step()  # type: ignore[attr-defined]
            prober.sample(step=i)
        report = prober.report()
    v = report.get("tracemalloc/filtered_bytes")
    assert v is not None and v.leaking and v.culprits[0].startswith("json/"), v.describe()
    assert "no frame of the user's code among the frames traced" in v.note
