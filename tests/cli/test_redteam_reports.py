"""Third red-team round: reports and commands that must not hang or crash on odd input
(symlink loops under ``top``, mathtext in tags, deep site chains, bad numbers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memprobe.report._render_html import flame_graph
from memprobe.report import _tail
from memprobe.report._tail import Folder


def _cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memprobe", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def _lines(path: Path, n: int = 40, **tags: object) -> None:
    path.write_text("".join(json.dumps({
        "time": 1000.0 + i, "step": i, "pid": 7, **tags,
        "values": {"memprobe/process/rss_bytes": 1e8 + i * 2**20}}) + "\n" for i in range(n)))


# 8: memprobe top and symlink loops
def test_symlink_loops_are_walked_once_per_real_directory(tmp_path: Path) -> None:
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    _lines(d / "sub" / "run.jsonl")
    for name in ("a", "b", "c"):
        os.symlink(".", d / name)
    os.symlink("..", d / "sub" / "up")
    started = time.monotonic()
    tails = Folder([str(d)]).scan()
    assert time.monotonic() - started < 5
    # the one real file, found once (through the real directory or one link to it)
    assert len(tails) == 1 and tails[0].path.endswith("run.jsonl")


def test_a_link_to_the_root_is_a_bounded_walk_said_in_the_header(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    _lines(d / "run.jsonl")
    many = d / "many"
    for i in range(_tail.MAX_DIRS + 5):
        (many / f"x{i}").mkdir(parents=True)
    os.symlink("/", d / "root")
    os.symlink(".", d / "a")
    started = time.monotonic()
    r = _cli("top", "--once", str(d), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - started < 30
    head = r.stdout.splitlines()
    assert head[0].startswith("memprobe top: 1 process in 1 file")
    assert f"stopped after {_tail.MAX_DIRS} directories" in head[1]


# 17: mathtext in a tag or command
@pytest.mark.parametrize("flag,out", [("--plot", "o.png"), ("--html", "o.html")])
def test_a_dollar_sign_in_a_tag_is_drawn_as_text(tmp_path: Path, flag: str, out: str) -> None:
    pytest.importorskip("matplotlib")
    _lines(tmp_path / "m.jsonl", role="main", command=r"$\foo{$ x.py", name=r"a$\frac{$b")
    r = _cli("report", "m.jsonl", flag, out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    data = (tmp_path / out).read_bytes()
    assert data.startswith(b"\x89PNG") if flag == "--plot" else b"data:image/png" in data


# 18: a site chain of thousands of frames
def test_a_chain_of_thousands_of_frames_draws_without_recursion() -> None:
    chain = "--".join(f"f{i}.py:{i}" for i in range(5000))
    page = flame_graph([(chain, 4096.0), ("f0.py:0--other.py:1", 1024.0)])
    assert page.count("<div class=") == 5002  # the graph, then one box per frame
    assert "top:109978px'>f4999.py:4999" in page  # the deepest frame in the last row
    assert "left:0.000%;width:100.000%;top:0px'>f0.py:0" in page


def test_the_iterative_walk_keeps_the_widest_child_first_and_left_of_its_siblings() -> None:
    page = flame_graph([("a.py:1--b.py:2", 300.0), ("a.py:1--c.py:3", 100.0)])
    b, c = page.index("b.py:2"), page.index("c.py:3")
    assert b < c
    assert "left:75.000%;width:25.000%;top:22px'>c.py:3" in page


# 19: memprobe top --interval
@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "0.1"])
def test_top_refuses_an_interval_outside_its_range(tmp_path: Path, value: str) -> None:
    r = _cli("top", "--interval", value, str(tmp_path), cwd=tmp_path, timeout=30)
    assert r.returncode == 2, r
    assert "--interval must be a number of seconds from 0.2 to 86400" in r.stderr
    assert "Traceback" not in r.stderr


# 20: report --ray --max-file-mib
@pytest.mark.parametrize("value", ["nan", "inf", "1e-9", "1e300", "-1"])
def test_report_ray_refuses_a_file_cap_outside_its_range(tmp_path: Path, value: str) -> None:
    r = _cli("report", "--ray", "--max-file-mib", value, cwd=tmp_path, timeout=30)
    assert r.returncode == 2, r
    assert "--max-file-mib must be a number of MiB from" in r.stderr
    assert "Traceback" not in r.stderr
