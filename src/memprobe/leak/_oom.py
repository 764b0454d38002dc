"""How far this process is from being killed for memory: the nearest limit that applies.

Three limits kill a growing process, whichever it reaches first:

- its cgroup's memory limit (``memory.max`` in cgroup v2, ``memory.limit_in_bytes``
  in v1), the nearest set one up its cgroup path: the kernel kills with SIGKILL;
- in a Ray worker, Ray's memory monitor, which kills a worker once the node's used
  memory passes ``RAY_memory_usage_threshold`` (0.95 of its total by default);
- the machine's available memory.

:func:`oom_headroom` gives the bytes left before the nearest one; a leak's rate
turns it into hours (:func:`hours_to_oom`). Each read is a few small files and
one ``psutil.virtual_memory()``: done at a leak check, never per sample.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Headroom", "hours_to_oom", "oom_headroom"]

#: Ray's default ``RAY_memory_usage_threshold``.
RAY_DEFAULT_THRESHOLD = 0.95
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_NO_LIMIT_V1 = 1 << 60  # v1 reports "no limit" as a huge number near 2**63


@dataclass(frozen=True)
class Headroom:
    """Memory left before this process is killed.

    :ivar bytes: bytes the process can still grow by before the nearest limit.
    :ivar limit_bytes: that limit (for Ray: its threshold times the node's memory).
    :ivar source: ``"cgroup"``, ``"ray"`` or ``"machine"``.
    """

    bytes: int
    limit_bytes: int
    source: str


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:  # "max": no limit
        return None


def cgroup_headroom(root: Path = _CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")
                    ) -> Headroom | None:
    """The headroom under the nearest cgroup memory limit set, or None."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    best: Headroom | None = None
    for line in lines:
        _id, controllers, path = [*line.split(":", 2), "", ""][:3]
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2: walk up from the process's cgroup
            d = root / rel
            while True:
                limit = _read_int(d / "memory.max")
                used = _read_int(d / "memory.current")
                if limit is not None and used is not None:
                    h = Headroom(max(0, limit - used), limit, "cgroup")
                    best = h if best is None or h.bytes < best.bytes else best
                if d == root or root not in d.parents:
                    break
                d = d.parent
        elif "memory" in controllers.split(","):  # cgroup v1
            for d in (root / "memory" / rel, root / "memory"):
                limit = _read_int(d / "memory.limit_in_bytes")
                used = _read_int(d / "memory.usage_in_bytes")
                if limit is not None and used is not None and limit < _NO_LIMIT_V1:
                    h = Headroom(max(0, limit - used), limit, "cgroup")
                    best = h if best is None or h.bytes < best.bytes else best
                    break
    return best


def in_ray_worker() -> bool:
    """Whether this process is a Ray worker (or driver) that Ray's memory monitor watches."""
    ray = sys.modules.get("ray")
    if ray is None:
        return False
    try:
        return bool(ray.is_initialized())
    except Exception:  # a partial import of ray
        return False


def ray_threshold() -> float:
    """``RAY_memory_usage_threshold`` (a fraction of the node's memory), default 0.95.

    :raises ConfigError: the variable is set to something other than a number in (0, 1].
    """
    from .._errors import ConfigError

    raw = os.environ.get("RAY_memory_usage_threshold")
    if raw is None:
        return RAY_DEFAULT_THRESHOLD
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise ConfigError("RAY_memory_usage_threshold",
                          f"environment variable {raw!r}: not a fraction in (0, 1]")
    return value


def oom_headroom(ray: bool | None = None) -> Headroom | None:
    """The bytes this process can still grow by before the nearest memory limit kills it.

    :param ray: apply Ray's memory monitor's threshold; default: when Ray is initialized
        in this process.
    :returns: the nearest :class:`Headroom`, or None when no limit can be read.
    """
    found: list[Headroom] = []
    cgroup = cgroup_headroom()
    if cgroup is not None:
        found.append(cgroup)
    try:
        import psutil

        vm = psutil.virtual_memory()
    except Exception:  # no reading on this platform
        vm = None
    if vm is not None:
        found.append(Headroom(int(vm.available), int(vm.total), "machine"))
        if ray is None:
            ray = in_ray_worker()
        if ray:
            try:
                limit = int(ray_threshold() * vm.total)
            except ValueError:
                limit = int(RAY_DEFAULT_THRESHOLD * vm.total)
            used = int(vm.total - vm.available)
            found.append(Headroom(max(0, limit - used), limit, "ray"))
    return min(found, key=lambda h: h.bytes) if found else None


def hours_to_oom(headroom_bytes: float, rate_per_hour: float | None) -> float | None:
    """Hours until ``headroom_bytes`` is used up at ``rate_per_hour``; None when not growing.

    ```pycon
    >>> hours_to_oom(1 << 30, 512 << 20)
    2.0

    ```
    """
    if rate_per_hour is None or not rate_per_hour > 0:
        return None
    return max(0.0, headroom_bytes) / rate_per_hour
