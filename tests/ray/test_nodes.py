"""Two nodes: each process tagged with its own node; a killed and restarted actor resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray")

RSS = 'ray_memprobe_process_rss_bytes{{name="Pinned", index="{index}"}}'


@ray.remote(num_cpus=0.25, max_restarts=1)
class Pinned:
    def where(self) -> tuple[int, str]:
        return os.getpid(), ray.get_runtime_context().get_node_id()


def test_node_tags_and_a_restarted_actor_resumes_without_stale_series(ray_cluster, prometheus):
    head = Pinned.options(name="pinned-head", resources={"head": 0.01}).remote()
    second = Pinned.options(name="pinned-second", resources={"second": 0.01}).remote()
    try:
        (_, head_node), (pid, second_node) = ray.get([head.where.remote(), second.where.remote()])
        assert head_node == ray_cluster.head_id and second_node == ray_cluster.worker_id
        for index, node in (("pinned-head", head_node), ("pinned-second", second_node)):
            r = prometheus.wait_for(RSS.format(index=index), lambda r: len(r) == 1)
            assert r[0]["metric"]["node"] == node
        before = prometheus.query(RSS.format(index="pinned-second"))[0]["metric"]["WorkerId"]

        os.kill(pid, signal.SIGKILL)  # Ray restarts it (max_restarts=1), in a new process
        deadline = time.monotonic() + 60
        while True:
            try:
                new_pid, node = ray.get(second.where.remote(), timeout=10)
                break
            except ray.exceptions.ActorUnavailableError:  # while it restarts
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert new_pid != pid and node == second_node

        # The new process exports under the same role, name, index and node; the dead
        # one's series leaves the scrape, so the count goes back to one.
        def resumed(r: list[dict]) -> bool:
            return len(r) == 1 and r[0]["metric"]["WorkerId"] != before

        r = prometheus.wait_for(RSS.format(index="pinned-second"), resumed, timeout=90)
        assert r[0]["metric"]["node"] == second_node
        every = prometheus.query('count(ray_memprobe_process_rss_bytes{name="Pinned"})')
        assert every[0]["value"][1] == "2"
        # The dashboard's per-process view sees one line per actor throughout.
        by = prometheus.query('max by (role, name, index, node) '
                              '(ray_memprobe_process_rss_bytes{name="Pinned"})')
        assert len(by) == 2
    finally:
        ray.kill(head)
        ray.kill(second)


def test_the_node_local_jsonl_files_of_both_nodes_make_one_report(ray_cluster):
    """Runs after the test above: the setup hook also wrote one JSONL file per process."""
    files = sorted(ray_cluster.jsonl_dir.glob("*/memprobe-*.jsonl"))
    nodes = set()
    for f in files:
        first = json.loads(f.read_text().splitlines()[0])
        assert {"role", "name", "index", "node"} <= set(first), first
        nodes.add(first["node"])
    assert nodes == {ray_cluster.head_id, ray_cluster.worker_id}
    r = subprocess.run([sys.executable, "-m", "memprobe", "report", *map(str, files)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Pinned" in r.stdout and ray_cluster.worker_id[:8] in r.stdout, r.stdout[:3000]
