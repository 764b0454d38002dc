"""Following growing files: only what was appended, whatever the file does meanwhile."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from memprobe.report._jsonl import MAX_LINE_BYTES
from memprobe.report._tail import Folder, Tail


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12),
       st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_lines_are_those_written_however_the_writes_are_cut(tmp_path_factory, lines, cuts):
    """Law: reading after each append gives each complete line once, in order."""
    path = tmp_path_factory.mktemp("t") / "f.jsonl"
    path.write_bytes(b"")
    data = b"".join(line + b"\n" for line in lines)
    tail = Tail(str(path))
    got: list[bytes] = []
    start = 0
    for cut in sorted(c % (len(data) + 1) for c in cuts) + [len(data)]:
        _append(path, data[start:cut])
        start = max(start, cut)
        got += tail.read()
    assert got == lines


def test_a_partial_last_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"one\ntw")
    tail = Tail(str(path))
    assert list(tail.read()) == [b"one"]
    assert list(tail.read()) == []
    _append(path, b"o\n")
    assert list(tail.read()) == [b"two"]


def test_a_rotated_or_truncated_file_is_read_from_its_start(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"a\nb\n")
    tail = Tail(str(path))
    assert list(tail.read()) == [b"a", b"b"]
    os.rename(path, tmp_path / "f.jsonl.1")  # rotated: a new file by the same name
    path.write_bytes(b"c\n")
    assert list(tail.read()) == [b"c"]
    path.write_bytes(b"")  # truncated in place: shorter than the offset reached
    assert list(tail.read()) == []
    _append(path, b"d\n")
    assert list(tail.read()) == [b"d"]


def test_a_vanished_file_reads_nothing_and_a_fifo_is_not_read(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"a\n")
    tail = Tail(str(path))
    path.unlink()
    assert list(tail.read()) == []
    os.mkfifo(path)  # opened without blocking, then refused
    assert list(tail.read()) == []


def test_a_line_over_the_cap_is_dropped_and_memory_stays_bounded(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"a\n" + b"x" * (MAX_LINE_BYTES + 10) + b"\nb\n")
    tail = Tail(str(path))
    assert list(tail.read()) == [b"a", b"b"]
    assert tail.partial == b""


def test_reads_are_bounded_per_call_and_a_long_file_starts_near_its_end(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"".join(b"%05d\n" % i for i in range(1000)))
    tail = Tail(str(path))
    first = list(tail.read(max_bytes=60))
    assert first == [b"%05d" % i for i in range(10)]
    late = Tail(str(path))
    got = list(late.read(backlog_bytes=61))
    assert got == [b"%05d" % i for i in range(990, 1000)]  # the cut first line dropped


def test_a_folder_follows_files_that_appear_vanish_and_are_renamed(tmp_path):
    folder = Folder([str(tmp_path)])
    assert folder.scan() == []
    tmp = tmp_path / ".run.jsonl.abc123.tmp"  # memprobe run's output while it runs
    tmp.write_bytes(b"1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "other.jsonl").write_bytes(b"x\n")
    (tmp_path / "notes.txt").write_bytes(b"ignored\n")
    tails = folder.scan()
    assert sorted(os.path.basename(t.path) for t in tails) == [".run.jsonl.abc123.tmp",
                                                               "other.jsonl"]
    assert sorted(line for t in tails for line in t.read()) == [b"1", b"x"]
    _append(tmp, b"2\n")
    os.rename(tmp, tmp_path / "run.jsonl")  # renamed into place at the end: same inode
    (tmp_path / "sub" / "other.jsonl").unlink()
    (tail,) = folder.scan()
    assert tail.path == str(tmp_path / "run.jsonl")
    assert list(tail.read()) == [b"2"]  # not read again from its start


def test_a_named_file_is_followed_through_memprobe_runs_temporary_output(tmp_path):
    folder = Folder([str(tmp_path / "run.jsonl")])
    assert folder.scan() == []  # nothing yet: not an error
    tmp = tmp_path / ".run.jsonl.x1.tmp"
    tmp.write_bytes(b"1\n")
    (tail,) = folder.scan()
    assert list(tail.read()) == [b"1"]
