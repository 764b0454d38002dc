"""memprobe_rllib: memory probes for RLlib, on both API stacks.

>>> from memprobe_rllib import MemoryProbeCallback           # doctest: +SKIP
>>> config.callbacks(MemoryProbeCallback)                    # doctest: +SKIP
>>> config.callbacks(MemoryProbeCallback.configure(          # doctest: +SKIP
...     probes={"process": {}, "tracemalloc": {"every": 20}}, jsonl="logs/"))
>>> check_rllib_leaks(config).suspects                      # doctest: +SKIP
{}

Ray is imported only by this package (``memprobe`` itself never imports it),
and only when :class:`MemoryProbeCallback` is first looked up.
See ``docs/rllib.md`` for the key reference and the reduce semantics.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ComponentCheck",
    "LeakCheckResult",
    "MemoryProbeCallback",
    "check_rllib_leaks",
    "episode_end_callback",
    "sample_end_callback",
    "train_result_callback",
]

_LEAKCHECK = ("ComponentCheck", "LeakCheckResult", "check_rllib_leaks")


def __getattr__(name: str) -> Any:
    # Lazy: `import memprobe_rllib` stays cheap and Ray-free until the callback is used.
    if name in _LEAKCHECK:
        from . import leakcheck

        return getattr(leakcheck, name)
    if name in __all__:
        from . import _callback

        return getattr(_callback, name)
    raise AttributeError(f"module 'memprobe_rllib' has no attribute {name!r}")
