"""The HTML report in a real headless browser (Debian's chromium): the page renders its
tables and its image. Skipped when chromium is not installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from browser import chromium, needs_chromium, rows_with_run

pytestmark = needs_chromium



def test_the_page_renders_its_tables_and_image(tmp_path: Path) -> None:
    image = pytest.importorskip("matplotlib.image")
    (tmp_path / "leaky.py").write_text(
        "import time\nheld = []\nfor i in range(150):\n"
        "    held.append(bytearray(200_000))\n    time.sleep(0.01)\n")
    run = [sys.executable, "-m", "memprobe"]
    res = subprocess.run([*run, "run", "--probes", "process,gc,tracemalloc", "--interval",
                          "0.01", "-o", "run.jsonl", "leaky.py"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([*run, "report", "run.jsonl", "--html", "r.html"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    shot = tmp_path / "shot.png"
    res = chromium(tmp_path, tmp_path / "r.html", "--window-size=1280,2600",
                   f"--screenshot={shot}")
    assert shot.exists(), res.stderr
    pixels = image.imread(str(shot))[..., :3]
    assert pixels.shape[0] >= 2000 and pixels.shape[1] >= 1200
    rgb = (pixels * 255).round()
    # The plot: its red leak markers and its coloured lines, drawn from the inlined PNG.
    red = (rgb[..., 0] > 220) & (rgb[..., 1] < 60) & (rgb[..., 2] < 60)
    assert red.sum() > 50
    blue = (rgb[..., 2] > 150) & (rgb[..., 0] < 80)  # matplotlib's first line colour
    assert blue.sum() > 200
    # The tables: horizontal cell borders in #ccc, each over 300 px wide.
    border = (abs(rgb[..., 0] - 204) < 8) & (abs(rgb[..., 1] - 204) < 8) & (
        abs(rgb[..., 2] - 204) < 8)
    assert rows_with_run(border, 300) >= 8
    # Text below the image: dark pixels over many rows (headings, cells, suspects).
    dark_rows = ((rgb.sum(axis=2) < 200).sum(axis=1) > 5).sum()
    assert dark_rows > 150


def test_the_page_draws_the_leaking_stacks_as_a_flame_graph(tmp_path: Path) -> None:
    """A leak through the json decoder: the flame graph's top row is the user's line
    (orange), the json lines below it (blue), as wide as the page's graph."""
    image = pytest.importorskip("matplotlib.image")
    (tmp_path / "leaky.py").write_text(
        "import json, time\nDOC = json.dumps([str(i) * 20 for i in range(300)])\nheld = []\n"
        "for i in range(200):\n    held.append(json.loads(DOC))\n    time.sleep(0.01)\n")
    run = [sys.executable, "-m", "memprobe"]
    res = subprocess.run([*run, "run", "--probes", "process,gc,tracemalloc", "--interval",
                          "0.01", "-o", "run.jsonl", "leaky.py"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([*run, "report", "run.jsonl", "--html", "r.html"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "r.html").read_text()
    assert "<div class='flame'" in page and "leaky.py:5" in page
    assert "http" not in page.split("<body>", 1)[1]  # nothing fetched at view time
    shot = tmp_path / "shot.png"
    res = chromium(tmp_path, tmp_path / "r.html", "--window-size=1280,3000",
                   f"--screenshot={shot}")
    assert shot.exists(), res.stderr
    rgb = (image.imread(str(shot))[..., :3] * 255).round()
    user = (abs(rgb[..., 0] - 0xF2) < 6) & (abs(rgb[..., 1] - 0xA6) < 6) & (
        abs(rgb[..., 2] - 0x5A) < 6)
    lib = (abs(rgb[..., 0] - 0x9F) < 6) & (abs(rgb[..., 1] - 0xC5) < 6) & (
        abs(rgb[..., 2] - 0xE8) < 6)
    assert rows_with_run(user, 600) >= 10 and rows_with_run(lib, 600) >= 10
    user_rows, lib_rows = user.any(axis=1).nonzero()[0], lib.any(axis=1).nonzero()[0]
    assert user_rows.min() < lib_rows.min()  # the user's frame on top
