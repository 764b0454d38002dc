"""``memprobe report --ray``: every node's JSONL read through Ray's state API, from the driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
memprobe_ray = pytest.importorskip("memprobe_ray")


@ray.remote(num_cpus=0.25)
class Hoarder:
    """Keeps 1 MiB more at each call: a leak the report names."""

    def __init__(self) -> None:
        self.kept: list[bytes] = []

    def grow(self, n: int) -> tuple[int, str]:
        for _ in range(n):
            self.kept.append(os.urandom(2**20))
        return os.getpid(), ray.get_runtime_context().get_node_id()


def _wait_lines(path: Path, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_bytes().count(b"\n") >= n):
        assert time.monotonic() < deadline, f"{path} has fewer than {n} lines after {timeout} s"
        time.sleep(0.3)


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memprobe", "report", *args],
                          capture_output=True, text=True, timeout=180)


def _section(stdout: str, index: str) -> str:
    """The report's section of the process whose label has ``index``."""
    parts = ("\n" + stdout).split("\n== pid ")
    found = [p for p in parts[1:] if f"index={index}," in p.splitlines()[0]]
    assert len(found) == 1, stdout[:3000]
    return found[0]


def _leaking_actor_on(resource: str, label: str) -> tuple[object, int, str]:
    actor = Hoarder.options(name=label, resources={resource: 0.01}).remote()
    pid, node = ray.get(actor.grow.remote(1))
    return actor, pid, node


def test_a_second_node_workers_files_reported_from_the_driver(ray_cluster, tmp_path):
    actor, pid, node = _leaking_actor_on("second", "hoarder-second")
    other, other_pid, head = _leaking_actor_on("head", "hoarder-head")
    try:
        assert (node, head) == (ray_cluster.worker_id, ray_cluster.head_id)
        path = ray_cluster.jsonl_dir / node / f"memprobe-{pid}.jsonl"
        for _ in range(50):  # 1 MiB a step, over some 45 samples
            ray.get(actor.grow.remote(1))
            time.sleep(0.4)
        _wait_lines(path, 45)
        _wait_lines(ray_cluster.jsonl_dir / head / f"memprobe-{other_pid}.jsonl", 3)
        html = tmp_path / "cluster.html"
        r = _report("--ray", ray_cluster.cluster.address, "--html", str(html))
        assert r.returncode == 0, r.stderr[-3000:]
        section = _section(r.stdout, "hoarder-second")
        first = section.splitlines()[0]
        assert f"{pid} (role=actor, name=Hoarder, index=hoarder-second, node={node})" in first
        assert "LEAK" in section, section
        # The head node's process is in the same report, labelled with its node.
        first = _section(r.stdout, "hoarder-head").splitlines()[0]
        assert f"{other_pid} (role=actor, name=Hoarder, index=hoarder-head, node={head})" in first
        assert "not read" not in r.stderr, r.stderr
        assert "hoarder-second" in html.read_text()
    finally:
        ray.kill(actor)
        ray.kill(other)


def test_report_from_python_in_the_driver(ray_cluster, capsys):
    actor, pid, node = _leaking_actor_on("second", "hoarder-py")
    try:
        _wait_lines(ray_cluster.jsonl_dir / node / f"memprobe-{pid}.jsonl", 3)
        assert memprobe_ray.report() == 0
        out = capsys.readouterr().out
        assert "index=hoarder-py" in out and f"node={node}" in out
    finally:
        ray.kill(actor)


def test_a_removed_node_is_listed_and_its_files_still_read(ray_cluster):
    """A third node joins, runs a leaking actor, and is removed before the report: the
    node is listed as not read, and its files, kept in the session log directory that
    the other nodes of this one-machine cluster serve, are still in the report."""
    third = ray_cluster.cluster.add_node(num_cpus=1, resources={"third": 1})
    ray_cluster.cluster.wait_for_nodes()
    actor = None
    try:
        actor, pid, node = _leaking_actor_on("third", "hoarder-third")
        assert node == third.node_id
        path = ray_cluster.jsonl_dir / node / f"memprobe-{pid}.jsonl"
        _wait_lines(path, 3)
    finally:
        ray_cluster.cluster.remove_node(third)
    r = _report("--ray", ray_cluster.cluster.address)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"node {third.node_id} not read: node dead" in r.stderr, r.stderr
    section = _section(r.stdout, "hoarder-third")
    assert f"index=hoarder-third, node={third.node_id}" in section.splitlines()[0]


def test_no_state_api_is_one_clear_error(tmp_path):
    r = _report("--ray", "127.0.0.1:9")  # nothing listens on the discard port
    assert r.returncode == 2
    assert "memprobe: error: " in r.stderr and "state API" in r.stderr, r.stderr
    assert json.dumps(r.stdout) == '""'


def test_top_on_a_pipe_shows_every_nodes_processes(ray_cluster):
    actor, pid, node = _leaking_actor_on("second", "hoarder-top")
    try:
        _wait_lines(ray_cluster.jsonl_dir / node / f"memprobe-{pid}.jsonl", 3)
        r = subprocess.run([sys.executable, "-m", "memprobe", "top", "--ray",
                            ray_cluster.cluster.address], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        row = next(x for x in r.stdout.splitlines() if "Hoarder[hoarder-top]" in x)
        assert row.split()[2] == node[:8] and str(pid) in row, r.stdout
    finally:
        ray.kill(actor)


def test_each_file_is_cut_at_the_cap_and_says_so(ray_cluster):
    """The files the tests above left (each over 10 KiB): read 10 KiB of each."""
    r = _report("--ray", ray_cluster.cluster.address, "--max-file-mib", "0.01")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "read its first 0.01 MiB only (--max-file-mib)" in r.stderr, r.stderr
    assert "index=hoarder-second" in r.stdout
