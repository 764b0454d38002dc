"""memprobe_rllib: memory probes and live leak verdicts for RLlib, on both API stacks.

```pycon
>>> from memprobe_rllib import MemoryProbeCallback           # doctest: +SKIP
>>> config.callbacks(MemoryProbeCallback)                    # doctest: +SKIP
>>> config.callbacks(MemoryProbeCallback.configure(diagnose=True, jsonl="logs/"))  # doctest: +SKIP
>>> check_rllib_leaks(config).suspects                      # doctest: +SKIP
{}

```

Needs Ray (``pip install "pymemprobe[rllib]"``); ``memprobe`` itself never imports
it. Ray is imported only when :class:`MemoryProbeCallback` is first looked up.
See ``docs/rllib.md`` for the keys, their reduce and the cost of each mode.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

_INSTALL = 'pip install "pymemprobe[rllib]"'


def _find_spec(name: str, path: Sequence[str] | None) -> Any:
    """The spec the import system would use for ``name``, without importing it or its parent.

    Asks each finder on ``sys.meta_path`` in turn, as ``import`` does; ``None`` when
    none finds it or a finder refuses it (raises ``ImportError``).
    """
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            spec = find_spec(name, path)
        except ImportError:
            return None
        if spec is not None:
            return spec
    return None


def _missing_ray() -> str | None:
    """``"ray"`` or ``"ray.rllib"``, whichever cannot be imported first, else ``None``."""
    if "ray" in sys.modules:
        ray = sys.modules["ray"]
        if ray is None:
            return "ray"
        locations = getattr(ray, "__path__", None)
    else:
        spec = _find_spec("ray", None)
        if spec is None:
            return "ray"
        locations = spec.submodule_search_locations
    if "ray.rllib" in sys.modules:
        return None if sys.modules["ray.rllib"] is not None else "ray.rllib"
    return None if locations and _find_spec("ray.rllib", list(locations)) else "ray.rllib"


_MISSING = _missing_ray()
if _MISSING is not None:
    raise ImportError(
        f"memprobe_rllib needs Ray RLlib, and {_MISSING} cannot be imported: {_INSTALL}",
        name=_MISSING,
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
    if name == "CallbackOptions":
        from ._options import CallbackOptions

        return CallbackOptions
    if name not in __all__:
        raise AttributeError(f"module 'memprobe_rllib' has no attribute {name!r}")
    try:
        if name in _LEAKCHECK:
            from . import leakcheck as module
        elif name.endswith("_callback"):
            from . import _hooks as module
        else:
            from . import _callback as module
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing.split(".")[0] in ("memprobe", "memprobe_rllib"):
            raise
        # RLlib found but one of its own dependencies (torch, gymnasium, ...) is not.
        raise ImportError(f"memprobe_rllib.{name} needs Ray RLlib and its dependencies, and "
                          f"{missing} cannot be imported: {_INSTALL}", name=missing) from exc
    return getattr(module, name)
