"""Envs for the leak tests: CartPoles that keep 4 KiB, or three small objects, per step
in a module-level list, and one whose step() raises."""

from __future__ import annotations

from typing import Any

from gymnasium.envs.classic_control.cartpole import CartPoleEnv

LEAKED: list[bytearray] = []


class _KeepingCartPole(CartPoleEnv):
    """CartPole-v1's dynamics, episodes capped at 500 steps; ``keep()`` after each step."""

    def __init__(self, config: Any = None) -> None:
        super().__init__()
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        self._steps = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        self.keep()
        self._steps += 1
        return obs, reward, terminated, truncated or self._steps >= 500, info

    def keep(self) -> None:
        """What a step keeps forever (nothing here)."""


class LeakyCartPole(_KeepingCartPole):
    """Every ``step()`` keeps 4 KiB forever."""

    def keep(self) -> None:
        LEAKED.append(bytearray(4096))  # LEAK: this line is the culprit the tests look for


def leak_line() -> str:
    """``memprobe_test_leaky_env.py:<line>`` of the leaking statement."""
    import inspect

    src, first = inspect.getsourcelines(LeakyCartPole.keep)
    off = next(i for i, line in enumerate(src) if "LEAKED.append" in line)
    return f"memprobe_test_leaky_env.py:{first + off}"


class StepNote:
    """A small object of a class of its own: what RetainingCartPole keeps."""

    def __init__(self, step: int) -> None:
        self.step = step


class RetainingCartPole(_KeepingCartPole):
    """Every ``step()`` keeps three small ``StepNote``s (~300 B)."""

    def keep(self) -> None:
        NOTES.extend(StepNote(self._steps) for _ in range(3))


NOTES: list[StepNote] = []


class BrokenCartPole(CartPoleEnv):
    """CartPole whose ``step()`` raises (the checker must name the component)."""

    def __init__(self, config: Any = None) -> None:
        super().__init__()

    def step(self, action: Any) -> Any:
        raise RuntimeError("this env is broken on purpose")


class EpisodeLeakCartPole(_KeepingCartPole):
    """Every ``reset()`` keeps ``config["kib"]`` KiB (default 5), or ``config["bytes"]``
    bytes, forever: a slow leak, a few KiB per episode (issue 28), or less."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        config = config or {}
        self._size = int(config.get("bytes", int(config.get("kib", 5)) * 1024))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        LEAKED.append(bytearray(self._size))  # LEAK: one block per episode
        return super().reset(seed=seed, options=options)


def episode_leak_line() -> str:
    """``memprobe_test_leaky_env.py:<line>`` of EpisodeLeakCartPole's leaking statement."""
    import inspect

    src, first = inspect.getsourcelines(EpisodeLeakCartPole.reset)
    off = next(i for i, line in enumerate(src) if "LEAKED.append" in line)
    return f"memprobe_test_leaky_env.py:{first + off}"


NUMPY_LEAKED: list[Any] = []


class NumpyLeakyCartPole(_KeepingCartPole):
    """Every ``step()`` keeps an ``np.ones(512)`` (4 KiB): numpy allocates, this line keeps."""

    def keep(self) -> None:
        import numpy as np

        NUMPY_LEAKED.append(np.ones(512))  # LEAK: the user's line above numpy's


def notes_line() -> str:
    """``memprobe_test_leaky_env.py:<line>`` of RetainingCartPole's retaining statement."""
    import inspect

    src, first = inspect.getsourcelines(RetainingCartPole.keep)
    off = next(i for i, line in enumerate(src) if "NOTES.extend" in line)
    return f"memprobe_test_leaky_env.py:{first + off}"


def numpy_leak_line() -> str:
    """``memprobe_test_leaky_env.py:<line>`` of the numpy-leaking statement."""
    import inspect

    src, first = inspect.getsourcelines(NumpyLeakyCartPole.keep)
    off = next(i for i, line in enumerate(src) if "NUMPY_LEAKED.append" in line)
    return f"memprobe_test_leaky_env.py:{first + off}"
