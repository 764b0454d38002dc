"""``objects``: live gc-tracked objects by type, and the types that grew."""

from __future__ import annotations

import gc
from collections import Counter
from typing import Any

from .._errors import ConfigError, show
from .._flatten import SiteMap
from ..hookspecs import hookimpl
from ..metrics import Metric


def type_name(t: type) -> str:
    """``module.QualName`` of a type; builtins without the module."""
    mod = getattr(t, "__module__", None) or ""
    qual = getattr(t, "__qualname__", None) or t.__name__
    return qual if mod in ("builtins", "") else f"{mod}.{qual}"


class ObjectsProbe:
    """Live gc-tracked objects by type: the total, the top-N types and the top-N by growth.

    Costly: it walks ``gc.get_objects()``,
    so it is off by default; give it an ``interval_seconds``
    (docs/performance.md has its cost).
    """

    metrics = {
        "total_count": Metric("live gc-tracked objects", "count"),
        "types_count": Metric("distinct types among them", "count"),
        "top/<type>/count": Metric("live objects of the type", "count"),
        "growth/<type>/count": Metric(
            "increase of the type's live objects since the previous sample", "count", "interval"),
    }

    def __init__(self, *, top: int = 10, collect: bool = False) -> None:
        if not isinstance(top, int) or isinstance(top, bool) or top < 0:
            raise ConfigError("objects.top", f"must be an int >= 0, got {show(top)}")
        if not isinstance(collect, bool):
            raise ConfigError("objects.collect", f"must be a bool, got {show(collect)}")
        self.top = top
        self.collect = collect
        self._previous: Counter[type] | None = None

    def start(self) -> None:
        self._previous = None

    def stop(self) -> None:
        self._previous = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_previous"] = None
        return state

    def sample(self) -> dict[str, Any]:
        if self.collect:
            gc.collect()
        objs = gc.get_objects()
        counts: Counter[type] = Counter(map(type, objs))
        del objs
        out: dict[str, Any] = {"total_count": sum(counts.values()), "types_count": len(counts)}
        if self.top:
            out["top"] = SiteMap(
                (type_name(t), {"count": c})
                for t, c in sorted(counts.items(), key=lambda kv: (-kv[1], type_name(kv[0])))[
                    : self.top
                ]
            )
            grown: list[tuple[str, int]] = []
            if self._previous is not None:
                for t, c in counts.items():
                    d = c - self._previous.get(t, 0)
                    if d > 0:
                        grown.append((type_name(t), d))
                grown.sort(key=lambda kv: (-kv[1], kv[0]))
            out["growth"] = SiteMap((n, {"count": d}) for n, d in grown[: self.top])
        # Keep only counts keyed by type: holding the types keeps no instances alive.
        self._previous = counts
        return out


@hookimpl
def memprobe_register_probes(register: Any) -> None:
    register("objects", ObjectsProbe)
