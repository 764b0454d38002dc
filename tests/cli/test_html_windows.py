"""The HTML report of a run that only has tracing windows (tracemalloc ``window_steps`` and
``period_steps``, no capture): its flame graph is what survived the windows, by site,
in a real headless browser (Debian's chromium); when nothing survived, the page says
why there is no graph. Skipped when chromium is not installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from browser import chromium, needs_chromium, rows_with_run

pytestmark = needs_chromium

_APP = """
import ctypes, json, sys
import memprobe

DOC = json.dumps([str(i) * 20 for i in range(300)])
held = []
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p


def keep():
    if sys.argv[2] == "json":
        held.append(json.loads(DOC))  # a Python leak through the json decoder
    else:
        p = libc.malloc(64 * 1024)  # a native leak: nothing traced survives a window
        ctypes.memset(p, 1, 64 * 1024)


prober = memprobe.Prober(
    probes={"process": {}, "gc": {}, "tracemalloc": {"window_steps": 5, "period_steps": 20}},
    sink=sys.argv[1], load_entrypoints=False)
with prober:
    for step in range(400):
        keep()
        prober.sample(step)
"""


def _page(tmp_path: Path, leak: str) -> Path:
    (tmp_path / "leaky.py").write_text(_APP)
    res = subprocess.run([sys.executable, "leaky.py", "run.jsonl", leak], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([sys.executable, "-m", "memprobe", "report", "run.jsonl", "--html",
                          "r.html"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "LEAK" in res.stdout, res.stdout  # the page's graph is of a leak
    return tmp_path / "r.html"



def test_windowed_run_draws_what_survived_the_windows(tmp_path: Path) -> None:
    """A leak through the json decoder, seen only by tracemalloc windows: the flame
    graph's top row is the user's line (orange, the page's width), the json line below
    it (blue). main drew no graph for such a run."""
    image = pytest.importorskip("matplotlib.image")
    page = _page(tmp_path, "json")
    text = page.read_text()
    assert "memory surviving the tracemalloc windows" in text
    line = _APP.splitlines().index("        held.append(json.loads(DOC))  # a Python leak "
                                   "through the json decoder") + 1
    assert "<div class='flame'" in text and f"leaky.py:{line}" in text, text
    assert "http" not in text.split("<body>", 1)[1]  # nothing fetched at view time
    shot = tmp_path / "shot.png"
    chromium(tmp_path, page, "--window-size=1280,3000", f"--screenshot={shot}")
    assert shot.exists()
    rgb = (image.imread(str(shot))[..., :3] * 255).round()
    user = (abs(rgb[..., 0] - 0xF2) < 6) & (abs(rgb[..., 1] - 0xA6) < 6) & (
        abs(rgb[..., 2] - 0x5A) < 6)
    lib = (abs(rgb[..., 0] - 0x9F) < 6) & (abs(rgb[..., 1] - 0xC5) < 6) & (
        abs(rgb[..., 2] - 0xE8) < 6)
    assert rows_with_run(user, 600) >= 10 and rows_with_run(lib, 600) >= 10
    user_rows, lib_rows = user.any(axis=1).nonzero()[0], lib.any(axis=1).nonzero()[0]
    assert user_rows.min() < lib_rows.min()  # the user's frame on top


def test_windowed_run_of_a_native_leak_says_why_there_is_no_graph(tmp_path: Path) -> None:
    """A native leak (malloc through ctypes) under tracemalloc windows: nothing traced
    survives, so no graph is drawn, and the rendered page says why."""
    page = _page(tmp_path, "native")
    res = chromium(tmp_path, page, "--dump-dom")
    dom = res.stdout
    assert "<body>" in dom or "<body" in dom, res.stderr
    assert "class=\"flame\"" not in dom and "class='flame'" not in dom
    assert "no flame graph: no site's allocations survived half of the last" in dom, dom
    assert "tracemalloc windows" in dom
