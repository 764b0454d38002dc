"""memprobe across a Ray cluster: export to Prometheus through Ray's metrics, probe any worker.

Every worker process of a job, one line::

    ray.init(runtime_env={"worker_process_setup_hook": "memprobe_ray.setup"})

One Prober's samples, in any Ray process::

    prober = memprobe.Prober(sink=memprobe_ray.RayMetricsSink(role="driver"))

Every node's JSONL (each process's, in the node's session log directory), in one report
from anywhere in the cluster: ``memprobe report --ray`` or :func:`report`.

Needs ``ray[default]`` (``pip install "pymemprobe[ray]"``): without it Ray's
metrics agent exports nothing. Importing this package needs only memprobe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._names import PromMetric, prom_metric
    from ._report import report
    from ._sink import RayMetricsSink, RayMetricsUnavailable, require_ray_metrics
    from ._worker import (
        Tee,
        probed,
        ray_identity,
        setup,
        setup_hook,
        start_sampler,
        stop_sampler,
    )
    from .dashboard import dashboard_json, write_dashboard
    from .logs import (
        LOG_FOLDER,
        FetchedFile,
        FetchedJsonl,
        Tails,
        fetch_jsonl,
        read_tails,
        session_jsonl_dir,
    )

# Imported on first use: memprobe loads this package's plugin module (the
# ``ray_metrics`` sink's registration) in every process that makes a Prober, and
# that must not import the sink and the worker hook unless one is asked for.
_LAZY = {
    "LOG_FOLDER": ".logs",
    "FetchedFile": ".logs",
    "FetchedJsonl": ".logs",
    "Tails": ".logs",
    "fetch_jsonl": ".logs",
    "read_tails": ".logs",
    "report": "._report",
    "session_jsonl_dir": ".logs",
    "PromMetric": "._names",
    "prom_metric": "._names",
    "RayMetricsSink": "._sink",
    "RayMetricsUnavailable": "._sink",
    "require_ray_metrics": "._sink",
    "Tee": "._worker",
    "probed": "._worker",
    "ray_identity": "._worker",
    "setup": "._worker",
    "setup_hook": "._worker",
    "start_sampler": "._worker",
    "stop_sampler": "._worker",
    "dashboard_json": ".dashboard",
    "write_dashboard": ".dashboard",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memprobe_ray' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

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
    from ._sink import RayMetricsSink

    return RayMetricsSink(role=role, name="rllib", index=index, max_sites=max_sites)
