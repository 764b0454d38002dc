"""JSONL sink faults: a killed writer, a full disk, a path that cannot be a file.

The writer's faults never stop the loop (one warning, the Prober keeps its
history); the reader and ``memprobe report`` skip a truncated or bad line
with a warning naming ``file:line`` and read every complete line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

import memprobe
from memprobe.report._jsonl import JsonlReadError, read_samples

WRITER = textwrap.dedent(
    """\
    import sys
    import memprobe

    prober = memprobe.Prober(["process", "gc"], sink=sys.argv[1], load_entrypoints=False)
    prober.start()
    step = 0
    while True:
        prober.sample(step=step)
        step += 1
        if step == 200:
            print("ready", flush=True)
    """
)


def memprobe_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memprobe", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The JSONL file of a writer killed with SIGKILL in the middle of its loop."""
    d = tmp_path_factory.mktemp("killed")
    path = d / "run.jsonl"
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(path)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        time.sleep(0.1)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    return path


def test_a_killed_writer_leaves_at_most_a_truncated_last_line(killed_run: Path) -> None:
    data = killed_run.read_bytes()
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # tail is b"" unless the kill cut a line
    assert len(complete) >= 200
    steps = [json.loads(line)["step"] for line in complete]
    assert steps == list(range(len(complete)))  # every complete line is whole and in order
    if tail:
        with pytest.raises(json.JSONDecodeError):
            json.loads(tail)
    samples = read_samples(killed_run) if not tail else None
    if samples is not None:
        assert [s.step for s in samples] == steps


def _truncated_copy(src: Path, dst: Path) -> tuple[int, int]:
    """``src`` with its last line cut in the middle, as a kill during a write leaves it.

    Returns (complete lines, the number of the cut line).
    """
    lines = src.read_bytes().split(b"\n")[:-1]
    last = lines[-1]
    dst.write_bytes(b"\n".join(lines[:-1]) + b"\n" + last[: len(last) // 2])
    return len(lines) - 1, len(lines)


def test_reader_skips_the_truncated_last_line_and_names_it(killed_run: Path, tmp_path) -> None:
    cut = tmp_path / "cut.jsonl"
    n_complete, lineno = _truncated_copy(killed_run, cut)
    with pytest.warns(memprobe.MemprobeWarning) as rec:
        samples = read_samples(cut)
    assert len(rec) == 1
    assert str(rec[0].message).startswith(f"{cut}:{lineno}: truncated last line skipped")
    assert [s.step for s in samples] == list(range(n_complete))
    assert all(s.values["memprobe/process/rss_bytes"] > 0 for s in samples)


def test_reader_skips_bad_lines_in_the_middle(tmp_path) -> None:
    path = tmp_path / "mixed.jsonl"
    with memprobe.Prober(["process"], sink=path, load_entrypoints=False) as prober:
        for step in range(5):
            prober.sample(step=step)
    good = path.read_text().splitlines()
    bad = [
        "not json at all",
        '{"time": 1, "step": 1, "pid": 1}',  # no values
        '{"time": 1, "step": 1, "pid": 1, "values": {"k": "1"}}',  # a str value
        '{"time": 1, "step": true, "pid": 1, "values": {}}',  # a bool step
        "[1, 2, 3]",
        '{"time": 1, "step": 1, "pid": 1, "values": {"k": NaN}}',
        "\x00\x00\x00",
    ]
    path.write_text("\n".join([good[0], *bad, *good[1:]]) + "\n")
    with pytest.warns(memprobe.MemprobeWarning) as rec:
        samples = read_samples(path)
    assert [s.step for s in samples] == [0, 1, 2, 3, 4]
    assert [str(w.message).split(": ")[0] for w in rec] == [
        f"{path}:{n}" for n in range(2, 2 + len(bad))
    ]
    assert all("bad line skipped" in str(w.message) for w in rec)


def test_report_cli_skips_the_truncated_line_with_a_warning(killed_run: Path, tmp_path) -> None:
    cut = tmp_path / "cut.jsonl"
    _, lineno = _truncated_copy(killed_run, cut)
    res = memprobe_cli("report", "cut.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert re.search(rf"warning: cut\.jsonl:{lineno}: truncated last line skipped", res.stderr)
    assert res.stderr.count("warning:") == 1
    assert "process/rss_bytes" in res.stdout and "1 process(es)" in res.stdout


def test_report_cli_names_a_missing_file(tmp_path) -> None:
    res = memprobe_cli("report", "nowhere.jsonl", cwd=tmp_path)
    assert res.returncode != 0
    assert "nowhere.jsonl: no such file" in res.stderr
    assert "Traceback" not in res.stderr


def test_reader_errors_name_the_path(tmp_path) -> None:
    with pytest.raises(JsonlReadError, match="no such file") as info:
        read_samples(tmp_path / "missing.jsonl")
    assert info.value.path == str(tmp_path / "missing.jsonl")
    with pytest.raises(JsonlReadError, match="is a directory"):
        read_samples(tmp_path)


def _sample_into(sink: str | Path, n: int = 5) -> memprobe.Prober:
    prober = memprobe.Prober(["process", "gc"], sink=sink, load_entrypoints=False)
    with prober:
        for step in range(n):
            values = prober.sample(step=step)
            assert values["memprobe/process/rss_bytes"] > 0
    return prober


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_disk_full_is_reported_once_and_the_loop_goes_on() -> None:
    with pytest.warns(memprobe.MemprobeWarning) as rec:
        prober = _sample_into("/dev/full")
    assert len(rec) == 1, [str(w.message) for w in rec]
    message = str(rec[0].message)
    assert "'/dev/full'" in message and "No space left on device" in message
    assert "no more samples go to that file" in message
    assert [s.step for s in prober.history] == [0, 1, 2, 3, 4]
    assert "memprobe/errors/sink" not in prober.history[-1].values  # reported by the sink itself


def test_path_under_a_regular_file_is_reported_once(tmp_path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a regular file, not a directory\n")
    target = blocker / "run.jsonl"
    with pytest.warns(memprobe.MemprobeWarning) as rec:
        prober = _sample_into(target)
    assert len(rec) == 1, [str(w.message) for w in rec]
    message = str(rec[0].message)
    assert str(target) in message and "failed" in message
    assert "Not a directory" in message
    assert len(prober.history) == 5
    assert blocker.read_text() == "a regular file, not a directory\n"


def test_path_that_is_a_directory_is_reported_once(tmp_path) -> None:
    with pytest.warns(memprobe.MemprobeWarning, match="Is a directory") as rec:
        prober = _sample_into(tmp_path)
    assert len(rec) == 1 and len(prober.history) == 5


# -- hostile files through the public reader (issue 19; the CLI side is tests/cli/test_hostile.py)
def _good(path: Path, n: int = 3) -> list[str]:
    with memprobe.Prober(["process"], sink=path, load_entrypoints=False) as prober:
        for step in range(n):
            prober.sample(step=step)
    return path.read_text().splitlines()


def test_read_samples_skips_a_recursion_error_line_only(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    good = _good(path)
    deep = '{"time": 1, "pid": 1, "values": {}, "t": ' + "[" * 50_000 + "]" * 50_000 + "}"
    path.write_text("\n".join([good[0], deep, *good[1:]]) + "\n")
    with pytest.warns(memprobe.MemprobeWarning, match=r"deep\.jsonl:2: bad line skipped "
                      r"\(RecursionError"):
        samples = memprobe.read_samples(path)
    assert [s.step for s in samples] == [0, 1, 2]


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_reader_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "x.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    with pytest.raises(memprobe.JsonlReadError, match=r"not a regular file|is a directory"):
        memprobe.read_samples(path)


def test_reader_reads_gzip_and_refuses_a_file_of_garbage(tmp_path: Path) -> None:
    import gzip

    plain = tmp_path / "run.jsonl"
    good = _good(plain)
    (tmp_path / "run.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    assert [s.step for s in memprobe.read_samples(tmp_path / "run.jsonl.gz")] == [0, 1, 2]
    (tmp_path / "junk.jsonl").write_text("junk\n" * 1000 + good[0] + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(memprobe.JsonlReadError, match="not a memprobe JSONL file"):
            memprobe.read_samples(tmp_path / "junk.jsonl")


def test_reader_keeps_bad_start_lines_as_warnings_once_a_good_line_comes(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    good = _good(path)
    path.write_text("\n".join(["junk"] * 4 + good) + "\n")
    with pytest.warns(memprobe.MemprobeWarning) as rec:
        assert len(memprobe.read_samples(path)) == 3
    assert [str(w.message).split(": ")[0] for w in rec] == [f"{path}:{n}" for n in range(1, 5)]
