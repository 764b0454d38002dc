"""Plain functions for ``config.callbacks(on_episode_end=...)`` and friends, each holding
a configured :class:`MemoryProbeCallback`."""

from __future__ import annotations

from typing import Any

from ._callback import MemoryProbeCallback

__all__ = ["HookFunction", "episode_end_callback", "sample_end_callback",
           "train_result_callback"]

class HookFunction:
    """A picklable callable for ``config.callbacks(on_episode_end=...)`` and friends.

    Holds a configured callback class; builds its instance (and so its Prober)
    lazily in the process where it is first called. Used as a plain function it
    logs at every call (there is no later hook to batch the logging in).
    """

    def __init__(self, cls: type[MemoryProbeCallback], hook: str) -> None:
        self.cls = cls
        self.hook = hook
        self._instance: MemoryProbeCallback | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if self._instance is None:
            self._instance = self.cls(flush_each_call=True)
        getattr(self._instance, self.hook)(*args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        return {"cls": self.cls, "hook": self.hook, "_instance": None}

    def __repr__(self) -> str:
        return f"memprobe_rllib.{self.hook}_callback({self.cls.options!r})"


def episode_end_callback(**options: Any) -> HookFunction:
    """A function for ``config.callbacks(on_episode_end=...)``: samples and logs per episode.

    Takes the options of :meth:`MemoryProbeCallback.configure` (checked now).
    """
    return HookFunction(MemoryProbeCallback.configure(**options), "on_episode_end")


def sample_end_callback(**options: Any) -> HookFunction:
    """A function for ``config.callbacks(on_sample_end=...)``: one sample per ``sample()`` call."""
    return HookFunction(
        MemoryProbeCallback.configure(**{**options, "trigger": "sample"}), "on_sample_end"
    )


def train_result_callback(**options: Any) -> HookFunction:
    """A function for ``config.callbacks(on_train_result=...)``: driver (and Learner) memory."""
    return HookFunction(MemoryProbeCallback.configure(**options), "on_train_result")
