"""Kept file descriptors that the program closes and reuses (issue 27, item 3): the JSONL
sink and the process probe never write to or read from the program's files."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import pytest

import memprobe
from memprobe._keptfd import all_same, identity, same_file


def test_same_file_follows_the_fd_not_the_number(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "a", os.O_WRONLY | os.O_CREAT)
    ident = identity(fd)
    assert same_file(fd, ident) and all_same(((fd, *ident),))
    os.close(fd)
    assert not same_file(fd, ident)
    fd2 = os.open(tmp_path / "b", os.O_WRONLY | os.O_CREAT)
    try:
        assert fd2 == fd and not same_file(fd2, ident)  # the number reused for another file
    finally:
        os.close(fd2)
    assert not same_file(-1, ident) and not same_file(2**40, ident)


def _reuse_sink_fd(sink: memprobe.JsonlSink, victim: Path) -> int:
    fd = sink._fd
    os.close(fd)
    new = os.open(victim, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    assert new == fd
    return new


def test_sink_reopens_its_file_when_the_program_reuses_its_fd(tmp_path: Path) -> None:
    out, victim = tmp_path / "out.jsonl", tmp_path / "victim.txt"
    prober = memprobe.Prober(probes=["gc"], sink=str(out))
    prober.sample()
    sink = prober.sink
    fd = _reuse_sink_fd(sink, victim)
    try:
        with pytest.warns(memprobe.MemprobeWarning,
                          match=rf"{out}.*closed or reused by the program.*reopened the path"):
            prober.sample()
        prober.sample()
        prober.stop()
        assert victim.read_bytes() == b""
        assert len(out.read_text().splitlines()) == 3
        os.fstat(fd)  # the program's fd is left open: the sink never closes it
    finally:
        os.close(fd)


def test_sink_stops_when_its_path_is_another_file_now(tmp_path: Path) -> None:
    out, victim = tmp_path / "out.jsonl", tmp_path / "victim.txt"
    sink = memprobe.JsonlSink(out)
    sample = memprobe.Sample(1.0, 0, os.getpid(), {"memprobe/x_bytes": 1})
    sink.write(sample)
    os.replace(tmp_path / "out.jsonl", tmp_path / "moved.jsonl")
    out.write_text("")
    fd = _reuse_sink_fd(sink, victim)
    try:
        with pytest.warns(memprobe.MemprobeWarning, match="the path is now another file"):
            sink.write(sample)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sink.write(sample)  # off, silently
        sink.close()
        assert victim.read_bytes() == b"" and out.read_text() == ""
        assert len((tmp_path / "moved.jsonl").read_text().splitlines()) == 1
    finally:
        os.close(fd)


def test_process_probe_never_reads_the_programs_file(tmp_path: Path) -> None:
    from memprobe.probes.process import ProcessProbe

    probe = ProcessProbe()
    probe.start()
    victim = tmp_path / "statm-lookalike"
    victim.write_text("1 2 3 4 5 6 7\n")  # parses like statm: the values would be wrong
    fd = probe._statm
    os.close(fd)
    new = os.open(victim, os.O_RDONLY)
    try:
        assert new == fd
        with pytest.raises(OSError, match="closed or reused the file descriptors"):
            probe.sample()
        values = dict(zip(probe.columns, probe.sample()))  # reopened: its own statm again
        assert values["rss_bytes"] > 1_000_000
        assert probe._statm != new
        os.fstat(new)  # the program's fd is left open
    finally:
        probe.stop()
        os.close(new)


@pytest.mark.parametrize("reuse", [True, False], ids=["reused", "closed"])
@pytest.mark.parametrize("kept", ["_statm", "_task_fd", "_fd_dirfd"])
def test_prober_drops_one_sample_and_goes_on(tmp_path: Path, kept: str, reuse: bool) -> None:
    """Through the Prober's flat path: each kept fd, closed or taken by the program, is
    noticed; one sample is dropped, the probe is not disabled."""
    victim = tmp_path / "v"
    victim.write_text("1 2 3 4 5 6 7\n")
    prober = memprobe.Prober(probes=["process"])
    prober.sample()
    probe = next(sp.probe for sp in prober._probes)
    fd = getattr(probe, kept)
    os.close(fd)
    new = os.open(victim, os.O_RDONLY)
    assert new == fd
    if not reuse:  # moved away: the probe's fd number stays closed
        os.dup2(new, 999)
        os.close(new)
        new = 999
    try:
        time.sleep(0.01)  # past count_max_age_seconds: the thread and fd counts are taken
        with pytest.warns(memprobe.ProbeFailedWarning, match="closed or reused"):
            first = prober.sample()
        second = prober.sample()
    finally:
        prober.stop()
        os.close(new)
    assert "memprobe/process/rss_bytes" not in first
    assert second["memprobe/process/rss_bytes"] > 1_000_000
    assert 0 < second["memprobe/process/num_threads"] < 1000
    assert 0 < second["memprobe/process/num_fds"] < 10_000
    assert json.dumps(second)


@pytest.mark.parametrize("kept", ["_statm", "_stat", "_task_fd", "_fd_dirfd"])
def test_process_probe_stop_leaves_a_reused_fd_open(tmp_path: Path, kept: str) -> None:
    """A kept descriptor the program closed and reused between two reads (``stat``'s
    is never read where the thread count has a kept fd) is not closed by ``stop()``."""
    from memprobe.probes.process import ProcessProbe

    probe = ProcessProbe()
    probe.start()
    probe.sample()
    fd = getattr(probe, kept)
    os.close(fd)
    new = os.open(tmp_path / "victim", os.O_RDONLY | os.O_CREAT)
    try:
        assert new == fd
        probe.stop()
        os.fstat(new)  # still open: the program's
    finally:
        os.close(new)
