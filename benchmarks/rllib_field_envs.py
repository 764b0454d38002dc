"""CartPole-v1 with real faults, and with growth that is not a leak, for field_accuracy_rllib.py.

Each env is CartPole-v1's own dynamics (``gymnasium.make("CartPole-v1")``,
with its 500-step limit) under a wrapper that adds one behaviour at
``step()`` or ``reset()``. Importable by the EnvRunners (the benchmark puts
this directory on their ``PYTHONPATH``). The line of each fault carries
``# FAULT:<name>``: the culprit a right verdict names.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
from typing import Any

import gymnasium as gym

#: What the leaking wrappers keep, module-level like a real leak's holder.
KEPT: list[Any] = []
_LIBC = ctypes.CDLL(None)
_LIBC.malloc.restype = ctypes.c_void_p
_LIBC.malloc.argtypes = [ctypes.c_size_t]
_LIBC.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
#: A json document the json leak decodes at every step (about 3 KiB once decoded).
_DOC = json.dumps([f"observation note {j}" for j in range(40)])


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


# -- leaks made through library calls, kept by the user's line (issue 24) ----------------


class NumpyLeak(_Base):
    """Keeps an ``np.ones(256)`` (2 KiB) per step: numpy allocates, this line keeps."""

    def step(self, action: Any) -> Any:
        import numpy as np

        out = self.env.step(action)
        KEPT.append(np.ones(256))  # FAULT:numpy
        return out


class TorchLeak(_Base):
    """Keeps a ``torch.ones(512)`` (2 KiB of float32 storage) per step. torch's CPU
    allocator is not Python's: tracemalloc sees only the small tensor objects."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        import torch

        torch.set_num_threads(1)

    def step(self, action: Any) -> Any:
        import torch

        out = self.env.step(action)
        KEPT.append(torch.ones(512))  # FAULT:torch
        return out


class JsonLeak(_Base):
    """Keeps a document decoded by ``json.loads`` (about 3 KiB of strings) per step."""

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        KEPT.append(json.loads(_DOC))  # FAULT:json
        return out


class RegexLeak(_Base):
    """Keeps four patterns compiled by ``re.compile`` (about 2 KiB) per step."""

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        self.steps += 1
        KEPT.append([re.compile(rf"s{self.steps}_{j}_(\d+)") for j in range(4)])  # FAULT:regex
        return out


class FactoryLeak(_Base):
    """Keeps a dataclass record built by a helper module's factory (about 2.4 KiB) per step."""

    def step(self, action: Any) -> Any:
        from rllib_field_helpers import make_record

        out = self.env.step(action)
        self.steps += 1
        KEPT.append(make_record(self.steps, out[0]))  # FAULT:factory
        return out


class NativeLibLeak(_Base):
    """Keeps 2 KiB from a C library's ``malloc`` per step, through a helper module
    (``native_helper.py``: a tiny C library it compiles and calls through ctypes),
    never freed."""

    def step(self, action: Any) -> Any:
        import native_helper

        out = self.env.step(action)
        KEPT.append(native_helper.make_buffer(2048))  # FAULT:native_lib
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
    # The user's code keeps what a library made. torch's storage is native memory
    # (tracemalloc does not trace its allocator); native_lib is malloc in C.
    "numpy_leak": (NumpyLeak, "python"),
    "torch_leak": (TorchLeak, "native"),
    "json_leak": (JsonLeak, "python"),
    "regex_leak": (RegexLeak, "python"),
    "factory_leak": (FactoryLeak, "python"),
    "native_lib_leak": (NativeLibLeak, "native"),
}


def fault_line(kind: str) -> str:
    """``rllib_field_envs.py:<line>`` of the line marked ``# FAULT:<kind>``."""
    with open(__file__) as f:
        for n, line in enumerate(f, 1):
            if line.rstrip().endswith(f"# FAULT:{kind}"):
                return f"rllib_field_envs.py:{n}"
    raise KeyError(kind)
