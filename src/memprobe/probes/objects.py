"""``objects``: live gc-tracked objects by type, and the types that grew; memprobe's
own objects (:mod:`memprobe._own`) are not counted."""

from __future__ import annotations

import gc
import heapq
from collections import Counter
from collections.abc import Mapping
from typing import Any

from .._errors import ConfigError, show
from .._flatten import SiteMap
from .._own import own_type_counts
from ..hookspecs import hookimpl
from ..metrics import Metric


def type_name(t: type) -> str:
    """``module.QualName`` of a type; builtins without the module."""
    mod = getattr(t, "__module__", None) or ""
    qual = getattr(t, "__qualname__", None) or t.__name__
    return qual if mod in ("builtins", "") else f"{mod}.{qual}"


def _largest(counts: Mapping[type, int], n: int) -> list[tuple[type, int]]:
    """The ``n`` largest counts, ties by type name. Names are made for the few near
    the top only: a name for each of thousands of types at every sample is churn
    that fragments the heap this probe measures."""
    if len(counts) <= n:
        ranked = list(counts.items())
    else:
        cut = heapq.nlargest(n, counts.values())[-1]
        ranked = [(t, c) for t, c in counts.items() if c >= cut]
    ranked.sort(key=lambda tc: (-tc[1], type_name(tc[0])))
    return ranked[:n]


class ObjectsProbe:
    """Live gc-tracked objects by type: the total, the top-N types and the top-N by growth.
    memprobe's own objects (a Prober's history and tiers, this probe's counts) are left
    out, found by what holds them (:mod:`memprobe._own`), not by their type.

    Costly: it walks ``gc.get_objects()``,
    so it is off by default; give it an ``interval_seconds``
    (docs/performance.md has its cost).
    """

    metrics = {
        "total_count": Metric("live gc-tracked objects, memprobe's own left out", "count",
                              judged=True, growth="objects"),
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
        # memprobe's own objects (the Prober's history and tiers, this probe's counts)
        # are left out: they are not the user's, whatever their type.
        counts = own_type_counts()
        out: dict[str, Any] = {"total_count": sum(counts.values()), "types_count": len(counts)}
        if self.top:
            top = _largest(counts, self.top)
            grown: dict[type, int] = {}
            if self._previous is not None:
                previous = self._previous
                for t, c in counts.items():
                    d = c - previous.get(t, 0)
                    if d > 0:
                        grown[t] = d
            most = _largest(grown, self.top)
            # The count of each type that grew most goes beside the largest: a class
            # the user leaks (a few hundred instances) is rarely among the most
            # numerous types (functions, dicts, tuples), and a type's verdict is
            # judged on its ``top`` count.
            listed = {t for t, _ in top}
            top += [(t, counts[t]) for t, _ in most if t not in listed]
            out["top"] = SiteMap((type_name(t), {"count": c}) for t, c in top)
            out["growth"] = SiteMap((type_name(t), {"count": d}) for t, d in most)
        # Keep only counts keyed by type: holding the types keeps no instances alive.
        self._previous = counts
        return out


@hookimpl
def memprobe_register_probes(register: Any) -> None:
    register("objects", ObjectsProbe)
