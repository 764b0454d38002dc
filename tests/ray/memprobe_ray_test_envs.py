"""An env for the Ray export tests: CartPole that leaks in EnvRunner 1 only.

Importable by name in every worker (tests/ray is on the workers' PYTHONPATH).
"""

from __future__ import annotations

from typing import Any

from gymnasium.envs.classic_control.cartpole import CartPoleEnv

KEPT: list[bytes] = []
#: Bytes EnvRunner 1 keeps per step: written pages, so rss grows.
LEAK_BYTES = 512 << 10
#: The most it keeps, so that a long run cannot exhaust the machine.
LEAK_CAP = 4000


class LeakyOnRunnerOne(CartPoleEnv):
    """CartPole-v1; in the EnvRunner with ``worker_index == 1`` each step keeps 512 KiB."""

    def __init__(self, config: Any = None) -> None:
        super().__init__()
        self.leaks = getattr(config, "worker_index", 0) == 1

    def step(self, action: Any) -> Any:
        if self.leaks and len(KEPT) < LEAK_CAP:
            KEPT.append(b"\x01" * LEAK_BYTES)
        return super().step(action)
