"""``memprobe top``: the board's laws, the snapshot on a pipe, and the live table in tmux."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memprobe.report._top import WINDOW, Board, sparkline

LEAKY = """
import time
kept = []
def hoard():
    kept.append(bytearray(512 * 1024))
for i in range(1200):
    hoard()
    time.sleep(0.05)
"""
CALM = """
import time
for i in range(1200):
    x = bytearray(512 * 1024)
    time.sleep(0.05)
"""


def _line(t: float, pid: int, rss: float, **tags: object) -> bytes:
    return json.dumps({"time": t, "step": None, "pid": pid, **tags,
                       "values": {"memprobe/process/rss_bytes": rss}}).encode()


def test_rows_sort_by_growth_and_keep_a_bounded_window() -> None:
    board = Board()
    for i in range(WINDOW + 50):
        board.feed(_line(i, 1, 1e6, role="main"))
        board.feed(_line(i, 2, 1e6 + i * 1e5, role="actor", name="A", index="3", node="n" * 56))
    rows = board.refresh()
    assert [r.pid for r in rows] == [2, 1]
    assert rows[0].rate_bytes_per_second == pytest.approx(1e5)
    assert rows[0].process == "actor A[3]" and rows[0].cells()[1] == "n" * 8
    assert rows[0].verdict.startswith("LEAK") and rows[1].verdict != "LEAK"
    assert all(len(r.samples) == WINDOW for r in rows)


def test_samples_read_again_are_skipped_and_bad_lines_counted() -> None:
    board = Board()
    for _ in range(2):  # a rotated file, a Ray tail overlapping the last one
        for i in range(5):
            board.feed(_line(i, 7, 1.0, role="env_runner", env_runner=2))
    board.feed(b"{not json")
    board.feed(b"[" * 100_000)  # deep nesting: skipped, counted
    (row,) = board.refresh()
    assert len(row.samples) == 5 and board.bad_lines == 2
    assert row.process == "env_runner[2]"


def test_sparkline_spans_the_range() -> None:
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5, 5]) == "▁▁" and sparkline([]) == ""


@given(st.floats(1e3, 1e12), st.lists(st.floats(0, 1), min_size=1, max_size=24))
def test_a_flat_process_stays_low_and_a_doubling_reaches_the_top(level, wiggles) -> None:
    """Noise under 1% of the level draws no bar above the lowest; growth that doubles
    the level spans the whole height, wherever the level is."""
    flat = [level * (1 + 0.01 * w) for w in wiggles]
    assert set(sparkline(flat)) == {"▁"}
    grown = sparkline([level, *flat, 2 * level])
    assert grown[0] == "▁" and grown[-1] == "█"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memprobe", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_on_a_pipe_one_snapshot_then_exit(tmp_path: Path) -> None:
    lines = [_line(i, 9, 1e6 + i * 2**20, role="main", command="x.py") for i in range(60)]
    (tmp_path / "a.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    r = _cli("top", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("memprobe top: 1 process in 1 file,")  # #38 item 9: not "1 processes in 1 files"
    assert out[3].startswith("main x.py") and "+1.0 MiB/s" in out[3] and "LEAK" in out[3]


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    r = _cli("top", cwd=tmp_path)
    assert r.returncode == 2 and "give the JSONL files or directories" in r.stderr
    r = _cli("top", "--interval", "0", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 2 and "--interval must be a number of seconds from 0.2" in r.stderr


def _tmux(*args: str, socket: str) -> subprocess.CompletedProcess[str]:
    # The terminal's own size, not one a test runner put in the environment.
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True,
                          timeout=30, env=env)


def _top_row(screen: str) -> str:
    """The first process row under the column titles."""
    lines = screen.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("process") and "culprit" in line:
            rest = [x for x in lines[i + 1:] if x.strip() and not set(x.strip()) <= {"-", " "}]
            return rest[0] if rest else ""
    return ""


@pytest.mark.parametrize("plain", [False, True], ids=["rich", "plain"])
def test_the_leaking_process_rises_to_the_top_in_a_real_terminal(tmp_path: Path,
                                                                 plain: bool) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("no tmux (apt-get install -y tmux)")
    if not plain:
        pytest.importorskip("rich")
    (tmp_path / "leaky.py").write_text(LEAKY)
    (tmp_path / "calm.py").write_text(CALM)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    runs = [subprocess.Popen([sys.executable, "-m", "memprobe", "run", "--interval", "0.05",
                              "--probes", "process,gc,tracemalloc", "-o",
                              str(out / f"{name}.jsonl"), f"{name}.py"],
                             cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL) for name in ("calm", "leaky")]
    socket = f"memprobe-test-{os.getpid()}-{plain}"
    command = " ".join([sys.executable, "-m", "memprobe", "top", "--interval", "0.5",
                        *(["--plain"] if plain else []), str(out)])
    try:
        r = _tmux("new-session", "-d", "-x", "220", "-y", "30", "-e",
                  f"PYTHONPATH={env['PYTHONPATH']}", command, socket=socket)
        assert r.returncode == 0, r.stderr
        deadline = time.monotonic() + 90
        screen = row = ""
        while time.monotonic() < deadline:
            screen = _tmux("capture-pane", "-p", socket=socket).stdout
            row = _top_row(screen)
            if "leaky.py" in row and "LEAK" in row and "leaky.py:5" in row:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the leaking process is not at the top with its culprit:\n{screen}")
        assert "calm.py" in screen, screen  # both processes shown, the calm one below
        _tmux("send-keys", "q", socket=socket)
        deadline = time.monotonic() + 15
        while _tmux("has-session", socket=socket).returncode == 0:
            assert time.monotonic() < deadline, "memprobe top did not quit on q"
            time.sleep(0.2)
    finally:
        _tmux("kill-server", socket=socket)
        for p in runs:
            p.kill()
            p.wait()


def test_verdicts_are_spread_over_refreshes_within_their_budget(monkeypatch) -> None:
    import memprobe.report._top as top

    monkeypatch.setattr(top, "JUDGE_BUDGET_SECONDS", 0.0)  # one verdict per refresh
    board = Board()
    for pid in range(3):
        for i in range(50):
            board.feed(_line(i, pid, 1e6 + pid * i * 1e5, role="main"))
    board.refresh(now=100.0)
    assert sum(r.verdict != "-" for r in board.rows.values()) == 1
    assert all(r.rss_bytes is not None for r in board.rows.values())  # rss follows anyway
    board.refresh(now=101.0)
    board.refresh(now=102.0)
    assert all(r.verdict != "-" for r in board.rows.values())
    first = board.refresh(now=103.0)[0]
    assert first.pid == 2 and first.verdict.startswith("LEAK")
