"""CartPole-v1 with real faults, and with growth that is not a leak, for field_accuracy_rllib.py.

Each env is CartPole-v1's own dynamics (``gymnasium.make("CartPole-v1")``,
with its 500-step limit) under a wrapper that adds one behaviour at
``step()`` or ``reset()``. Importable by the EnvRunners (the benchmark puts
this directory on their ``PYTHONPATH``). The line of each fault carries
``# FAULT:<name>``: the culprit a right verdict names.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import gymnasium as gym

#: What the leaking wrappers keep, module-level like a real leak's holder.
KEPT: list[Any] = []
_LIBC = ctypes.CDLL(None)
_LIBC.malloc.restype = ctypes.c_void_p
_LIBC.malloc.argtypes = [ctypes.c_size_t]
_LIBC.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]


class TrajectoryNote:
    """A class of its own, retained by the objects leak."""

    def __init__(self, step: int, obs: Any) -> None:
        self.step = step
        self.obs = obs


class _Base(gym.Wrapper):  # type: ignore[type-arg]
    def __init__(self, config: Any = None) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.steps = 0


class Healthy(_Base):
    """CartPole-v1 under a wrapper that does nothing."""


class PythonLeak(_Base):
    """Keeps 2 KiB of Python heap per step, at one line."""

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        KEPT.append(bytearray(2048))  # FAULT:python
        return out


class NativeLeak(_Base):
    """``malloc``s 2 KiB per step through ctypes, touched, never freed."""

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        p = _LIBC.malloc(2048)  # FAULT:native
        _LIBC.memset(p, 1, 2048)
        return out


class FdLeak(_Base):
    """Opens /dev/null at every reset and never closes it."""

    def reset(self, **kwargs: Any) -> Any:
        KEPT.append(os.open(os.devnull, os.O_RDONLY))  # FAULT:fds
        return self.env.reset(**kwargs)


class ObjectsLeak(_Base):
    """Keeps one small object of its own class per step."""

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        KEPT.append(TrajectoryNote(self.steps, None))  # FAULT:objects
        self.steps += 1
        return out


class BoundedCache(_Base):
    """A cache of 1 KiB entries that fills to 3,000 entries (3 MiB), then stays full."""

    cache: dict[int, bytearray] = {}

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        self.steps += 1
        key = self.steps % 3000
        if key not in self.cache:
            self.cache[key] = bytearray(1024)
        return out


class Churn(_Base):
    """Allocates and frees lists, dicts and bytes every step (nothing kept)."""

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        junk = [bytearray(512) for _ in range(8)]
        table = {i: str(i) * 4 for i in range(64)}
        del junk, table
        return out


#: name -> (env class, expected: "healthy" | "bounded" | kind of leak)
CASES: dict[str, tuple[type, str]] = {
    "healthy": (Healthy, "healthy"),
    "bounded_cache": (BoundedCache, "bounded"),
    "churn": (Churn, "healthy"),
    "python_leak": (PythonLeak, "python"),
    "native_leak": (NativeLeak, "native"),
    "fd_leak": (FdLeak, "fds"),
    "objects_leak": (ObjectsLeak, "objects"),
}


def fault_line(kind: str) -> str:
    """``rllib_field_envs.py:<line>`` of the line marked ``# FAULT:<kind>``."""
    with open(__file__) as f:
        for n, line in enumerate(f, 1):
            if line.rstrip().endswith(f"# FAULT:{kind}"):
                return f"rllib_field_envs.py:{n}"
    raise KeyError(kind)
