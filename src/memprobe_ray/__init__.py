"""memprobe across a Ray cluster: export to Prometheus through Ray's metrics, probe any worker.

Every worker process of a job, one line::

    ray.init(runtime_env={"worker_process_setup_hook": "memprobe_ray.setup"})

One Prober's samples, in any Ray process::

    prober = memprobe.Prober(sink=memprobe_ray.RayMetricsSink(role="driver"))

Every node's JSONL (each process's, in the node's session log directory), in one report
from anywhere in the cluster: ``memprobe report --ray`` or :func:`report`.

Needs ``ray[default]`` (``pip install "memprobe[ray]"``): without it Ray's
metrics agent exports nothing. Importing this package needs only memprobe.
"""

from ._logs import (
    LOG_FOLDER,
    FetchedFile,
    FetchedJsonl,
    Tails,
    fetch_jsonl,
    read_tails,
    report,
    session_jsonl_dir,
)
from ._names import PromMetric, prom_metric
from ._sink import RayMetricsSink, RayMetricsUnavailable, require_ray_metrics
from ._worker import Tee, probed, ray_identity, setup, setup_hook, start_sampler, stop_sampler
from .dashboard import dashboard_json, write_dashboard

__all__ = [
    "LOG_FOLDER",
    "FetchedFile",
    "FetchedJsonl",
    "PromMetric",
    "RayMetricsSink",
    "RayMetricsUnavailable",
    "Tails",
    "Tee",
    "dashboard_json",
    "fetch_jsonl",
    "probed",
    "prom_metric",
    "ray_identity",
    "read_tails",
    "report",
    "require_ray_metrics",
    "rllib_sink",
    "session_jsonl_dir",
    "setup",
    "setup_hook",
    "start_sampler",
    "stop_sampler",
    "write_dashboard",
]


def rllib_sink(role: str, index: int | str, *, max_sites: int = 5) -> RayMetricsSink:
    """The sink ``MemoryProbeCallback.configure(ray_metrics=True)`` gives each Prober it builds.

    ``role``: ``"env_runner"``, ``"driver"`` or ``"learner"``; ``index``: the
    EnvRunner's ``worker_index`` or the Learner's index (``0`` for the driver).
    Call it inside the process that samples (an EnvRunner, the driver).
    """
    return RayMetricsSink(role=role, name="rllib", index=index, max_sites=max_sites)
