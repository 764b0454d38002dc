"""memprobe_rllib: memory probes and live leak verdicts for RLlib, on both API stacks.

>>> from memprobe_rllib import MemoryProbeCallback           # doctest: +SKIP
>>> config.callbacks(MemoryProbeCallback)                    # doctest: +SKIP
>>> config.callbacks(MemoryProbeCallback.configure(diagnose=True, jsonl="logs/"))  # doctest: +SKIP
>>> check_rllib_leaks(config).suspects                      # doctest: +SKIP
{}

Needs Ray (``pip install "memprobe[rllib]"``); ``memprobe`` itself never imports
it. Ray is imported only when :class:`MemoryProbeCallback` is first looked up.
See ``docs/rllib.md`` for the keys, their reduce and the cost of each mode.
"""

from __future__ import annotations

import importlib.util
from typing import Any

if importlib.util.find_spec("ray") is None:
    raise ImportError(
        'memprobe_rllib needs Ray RLlib, which is not installed: pip install "memprobe[rllib]"',
        name="ray",
    )

__all__ = [
    "CallbackOptions",
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
    # Lazy: `import memprobe_rllib` stays cheap until the callback is used.
    if name in _LEAKCHECK:
        from . import leakcheck

        return getattr(leakcheck, name)
    if name == "CallbackOptions":
        from ._options import CallbackOptions

        return CallbackOptions
    if name in __all__:
        from . import _callback

        return getattr(_callback, name)
    raise AttributeError(f"module 'memprobe_rllib' has no attribute {name!r}")
