"""``@memprobe_ray.probed`` on a real remote actor class and a real remote task.

The session's setup hook probes every worker; these actors and tasks turn it off
in their ``runtime_env`` (:data:`memprobe_ray._worker.HOOK_ENV`), so the sampler
that runs in their processes is the decorator's, with its own JSONL path.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from memprobe_ray import probed
from memprobe_ray._worker import HOOK_ENV

ray = pytest.importorskip("ray")


def _first_line(path, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return json.loads(path.read_text().splitlines()[0])
        time.sleep(0.3)
    pytest.fail(f"{path} was not written in {timeout:.0f} s")


def test_probed_remote_actor_and_task_are_sampled_and_tagged(ray_cluster, prometheus,
                                                             tmp_path):
    own = {"env_vars": {HOOK_ENV: "off"}}
    jsonl = str(tmp_path / "probed-{pid}.jsonl")

    @ray.remote(num_cpus=0.25, runtime_env=own)
    @probed(interval_seconds=0.2, jsonl=jsonl)
    class ProbedActor:
        def __init__(self, size: int) -> None:
            self.size = size

        def pid(self) -> int:
            return os.getpid()

    @ray.remote(num_cpus=0.25, runtime_env=own)
    @probed(interval_seconds=0.2, jsonl=jsonl)
    def probed_task(seconds: float) -> int:
        time.sleep(seconds)  # long enough for the sampler to see the task run
        return os.getpid()

    actor = ProbedActor.remote(3)
    try:
        actor_pid = ray.get(actor.pid.remote())
        task_pid = ray.get(probed_task.remote(1.5))
        first = _first_line(tmp_path / f"probed-{actor_pid}.jsonl")
        assert (first["role"], first["name"], first["pid"]) == ("actor", "ProbedActor",
                                                                actor_pid), first
        assert first["node"] in (ray_cluster.head_id, ray_cluster.worker_id)
        first = _first_line(tmp_path / f"probed-{task_pid}.jsonl")
        assert (first["role"], first["name"]) == ("task", "probed_task"), first
        assert first["values"]["memprobe/process/rss_bytes"] > 0, first
        # The setup hook stayed off there: no JSONL of its own for those processes.
        for pid in (actor_pid, task_pid):
            assert not list(ray_cluster.jsonl_dir.glob(f"*/memprobe-{pid}.jsonl"))
        found = prometheus.wait_for(
            'last_over_time(ray_memprobe_process_rss_bytes{name=~"ProbedActor|probed_task"}[5m])',
            lambda r: {m["metric"]["name"] for m in r} == {"ProbedActor", "probed_task"})
        assert {(m["metric"]["name"], m["metric"]["role"]) for m in found} == {
            ("ProbedActor", "actor"), ("probed_task", "task")}
    finally:
        ray.kill(actor)
