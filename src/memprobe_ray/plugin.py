"""memprobe's plugin entry for this package: registers the ``ray_metrics`` sink by name.

Found through the ``memprobe`` entry-point group, so that
``Prober(sinks={"ray_metrics": {"role": "env_runner", "index": 1}})`` works
wherever ``pymemprobe[ray]`` is installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import memprobe


def _factory(**options: Any) -> Any:
    from ._sink import RayMetricsSink

    return RayMetricsSink(**options)


@memprobe.hookimpl
def memprobe_register_sinks(register: Callable[..., None]) -> None:
    """Register the ``ray_metrics`` sink (:class:`memprobe_ray.RayMetricsSink`)."""
    register("ray_metrics", _factory)
