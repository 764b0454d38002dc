"""An env for the Ray export tests: CartPole that leaks in EnvRunner 1 only.

Importable by name in every worker (tests/ray is on the workers' PYTHONPATH).
"""

from __future__ import annotations

import time
from typing import Any

from gymnasium.envs.classic_control.cartpole import CartPoleEnv

KEPT: list[bytes] = []
#: The size of each block EnvRunner 1 keeps: written pages, so rss grows.
LEAK_BYTES = 512 << 10
#: How fast EnvRunner 1 leaks while it steps. The leak is paced by the clock, not by
#: the steps, so that it lasts as long on a fast machine as on a slow one: a leak paced
#: by steps filled its cap in 20 s on a fast machine, before the alarm had its points.
LEAK_BYTES_PER_SECOND = 8 << 20
#: The most it keeps (blocks), so that a long run cannot exhaust the machine: 2 GiB,
#: some 4 minutes of stepping.
LEAK_CAP = 4000


class LeakyOnRunnerOne(CartPoleEnv):
    """CartPole-v1; in the EnvRunner with ``worker_index == 1`` the steps keep 8 MiB/s."""

    started: float | None = None

    def __init__(self, config: Any = None) -> None:
        super().__init__()
        self.leaks = getattr(config, "worker_index", 0) == 1

    def step(self, action: Any) -> Any:
        if self.leaks:
            now = time.monotonic()
            if LeakyOnRunnerOne.started is None:
                LeakyOnRunnerOne.started = now
            due = (now - LeakyOnRunnerOne.started) * LEAK_BYTES_PER_SECOND // LEAK_BYTES
            while len(KEPT) < min(due, LEAK_CAP):
                KEPT.append(b"\x01" * LEAK_BYTES)
        return super().step(action)
