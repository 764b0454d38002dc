"""The real pipeline, once per session: a 2-node Ray cluster whose every worker is probed
through ``memprobe_ray``'s setup hook, and a Prometheus server scraping both nodes.

These tests start their own Ray (a ``ray.cluster_utils.Cluster``), so they run in
their own pytest invocation, apart from tests/rllib's local Ray:
``pytest tests/ray`` (every test here is marked ``ray_cluster``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
#: How often the test Prometheus scrapes and Ray's agents report (seconds).
SCRAPE_SECONDS = 1


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ray_cluster: starts the tests/ray session cluster; run tests/ray on its own"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.ray_cluster)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        pytest.skip("no prometheus binary, and no apt-get run as root to install it "
                    "(apt-get install -y prometheus)")
    flock = ["flock", "/tmp/apt.lock"] if shutil.which("flock") else []
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([*flock, apt, "update", "-q"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    subprocess.run([*flock, apt, "install", "-y", "-q", "prometheus"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    found = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.path.exists(found):
        pytest.skip("apt-get install prometheus left no prometheus binary")
    return found


class Prometheus:
    """A real Prometheus server on 127.0.0.1, queried over its HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _get(self, path: str, **params: Any) -> Any:
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{q}", timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` now: ``[{"metric": {...}, "value": [t, "v"]}]``."""
        data = self._get("/api/v1/query", query=expr)
        assert data["resultType"] in ("vector", "scalar"), data
        return data["result"] if data["resultType"] == "vector" else [data]

    def query_range(self, expr: str, seconds: float) -> list[dict[str, Any]]:
        """``expr`` over the last ``seconds``, one point per scrape."""
        end = time.time()
        return self._get("/api/v1/query_range", query=expr, start=end - seconds, end=end,
                         step=SCRAPE_SECONDS)["result"]

    def wait_for(self, expr: str, check: Callable[[list[dict[str, Any]]], bool],
                 timeout: float = 60.0) -> list[dict[str, Any]]:
        """Query ``expr`` until ``check(result)``; fail with the last result after ``timeout``."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if check(result):
                return result
            time.sleep(1)
        pytest.fail(f"after {timeout:.0f} s, {expr!r} gives {json.dumps(result)[:2000]}")


class RayCluster:
    """The session's cluster: its nodes' ids and metrics ports."""

    def __init__(self, cluster: Any, head_id: str, worker_id: str, ports: list[int],
                 jsonl_dir: Path) -> None:
        #: The nodes' memprobe folder of the session log directory (one per node under it).
        self.cluster = cluster
        self.jsonl_dir = jsonl_dir
        self.head_id = head_id
        self.worker_id = worker_id
        self.ports = ports


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """Two Ray nodes on this machine, with the dashboard (Ray's state API); every worker runs
    memprobe_ray's setup hook (0.5 s), writing its default JSONL."""
    pytest.importorskip("ray")
    memprobe_ray = pytest.importorskip("memprobe_ray")
    try:
        memprobe_ray.require_ray_metrics()
    except memprobe_ray.RayMetricsUnavailable as exc:
        pytest.skip(str(exc))
    from ray.cluster_utils import Cluster

    import ray

    os.environ["RAY_metrics_report_interval_ms"] = str(SCRAPE_SECONDS * 1000)
    ports = [free_port(), free_port()]
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 4, "metrics_export_port": ports[0], "include_dashboard": True,
        "dashboard_port": free_port(),
        "resources": {"head": 1},
    })
    worker = cluster.add_node(num_cpus=4, metrics_export_port=ports[1],
                              resources={"second": 1})
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    ray.init(address=cluster.address, log_to_driver=False, runtime_env={
        "env_vars": {"PYTHONPATH": path},
        "worker_process_setup_hook": memprobe_ray.setup_hook(
            interval_seconds=0.5, leak_check_every=10, history=120,
            # A young Ray worker's rss grows by some 10 kB a step for its first
            # minute; the leaking test actor grows 1 MB a step.
            leak_options={"thresholds": {"process/rss_bytes": 100_000}}),
    })
    cluster.wait_for_nodes()
    head_id = cluster.head_node.node_id
    # The setup hook's default JSONL: <session logs>/memprobe/<node id>/memprobe-<pid>.jsonl
    # (the nodes of this one-machine cluster share the session directory).
    jsonl_dir = Path(cluster.head_node.get_logs_dir_path()) / memprobe_ray.LOG_FOLDER
    try:
        yield RayCluster(cluster, head_id, worker.node_id, ports, jsonl_dir)
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="session")
def prometheus(ray_cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[Prometheus]:
    """Prometheus scraping both nodes' metrics ports every second, on 127.0.0.1 only."""
    binary = _prometheus_binary()
    root = tmp_path_factory.mktemp("prometheus")
    targets = [f"127.0.0.1:{p}" for p in ray_cluster.ports]
    config = root / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {SCRAPE_SECONDS}s\n"
        f"  evaluation_interval: {SCRAPE_SECONDS}s\n"
        "scrape_configs:\n"
        "  - job_name: ray\n"
        f"    static_configs: [{{targets: {json.dumps(targets)}}}]\n"
    )
    port = free_port()
    log = open(root / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={root / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    # Ray Data's usage poller queries this Prometheus instead of a missing localhost:9090.
    os.environ["RAY_PROMETHEUS_HOST"] = url
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/-/ready", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    sys.stderr.write((root / "prometheus.log").read_text())
                    pytest.fail("prometheus did not start (log above)")
                time.sleep(0.3)
        yield Prometheus(url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
