"""memprobe's own objects: what a count of live objects by type must not name as the user's.

A Prober's history, its alarm's tiers (a few dozen ``array.array`` per judged
metric, made when a metric is first judged), the verdicts its checks cache, a
capture's own counts: all are ordinary Python objects (arrays, tuples, dicts)
that a count of live objects by type would otherwise charge to the user, and a
user may leak the same types. So they are told apart by *who holds them*, not
by their type: :func:`own_objects` walks from memprobe's roots (the instances
:func:`register` was given, and the globals of memprobe's modules) through
what memprobe owns:

- instances of memprobe's classes, and functions, closures and caches
  defined in memprobe's modules;
- the plain containers (``tuple``, ``list``, ``dict``, ``set``, ``deque``...)
  they hold, and what those hold in turn.

It reaches, but never walks into, anything else: a callback the user passed
(``on_leak=app.handle`` holds the user's ``app``), a user's probe or sink, a
class, a module. An object reached is memprobe's; a user's object memprobe
holds a reference to (a callback) is counted once as memprobe's, the same at
both ends of a diff, so it changes no growth.
"""

from __future__ import annotations

import functools
import gc
import sys
import types
import weakref
from collections import (
    Counter,
    OrderedDict,
    _count_elements,  # type: ignore[attr-defined]
    defaultdict,
    deque,
)
from collections.abc import Iterable
from typing import Any

from ._sitestats import MEMPROBE_PACKAGES

_PACKAGES = MEMPROBE_PACKAGES
#: Plain containers: walked into when memprobe holds them.
_CONTAINERS = frozenset({tuple, list, dict, set, frozenset, deque, Counter, OrderedDict,
                         defaultdict, types.CellType, types.SimpleNamespace})

_CACHED = (functools._lru_cache_wrapper,)

_roots: weakref.WeakSet[Any] = weakref.WeakSet()


def register(obj: Any) -> None:
    """Count ``obj`` (a Prober, a capture, an adapter's per-process state: an instance
    of memprobe's, memprobe_rllib's or memprobe_ray's that the user's code or a
    framework, not a memprobe module, holds) and what it owns as memprobe's.
    Public as :func:`memprobe.register_own`. Held weakly: it counts while it lives."""
    _roots.add(obj)


#: The public name of :func:`register`.
register_own = register


def _is_own_module(name: str) -> bool:
    return name.split(".", 1)[0] in _PACKAGES


def _own_modules() -> list[types.ModuleType]:
    return [m for name, m in list(sys.modules.items())
            if _is_own_module(name) and isinstance(m, types.ModuleType)]


def _walks_into(obj: Any) -> bool:
    """Whether memprobe owns what ``obj`` holds (when memprobe holds ``obj``)."""
    t = type(obj)
    if t in _CONTAINERS:
        return True
    if isinstance(obj, (type, types.ModuleType)):
        return False
    if isinstance(obj, types.MethodType):  # a bound method of memprobe's, not a callback
        obj = obj.__func__
        t = type(obj)
    if isinstance(obj, (types.FunctionType, _CACHED)):
        module = getattr(obj, "__module__", None)  # lru_cache copies the function's
    else:  # an instance: of one of memprobe's classes?
        module = getattr(t, "__module__", None)
    return isinstance(module, str) and _is_own_module(module)


def own_objects(extra: Iterable[Any] = ()) -> list[Any]:
    """Every object memprobe owns now (see the module docstring), once each, its roots
    first; ``extra``: more roots (the caller itself). The list holds them alive: drop it
    soon."""
    module_dicts = {id(m.__dict__) for m in list(sys.modules.values())
                    if isinstance(m, types.ModuleType)}
    found: list[Any] = []
    seen: set[int] = {id(found), id(module_dicts)}
    stack: list[Any] = []
    seen.add(id(stack))
    for module in _own_modules():
        for key, value in list(module.__dict__.items()):
            if not key.startswith("__") and id(value) not in seen:
                seen.add(id(value))
                found.append(value)
                stack.append(value)
    for root in (*list(_roots), *extra):
        if id(root) not in seen:
            seen.add(id(root))
            found.append(root)
            stack.append(root)
    while stack:
        obj = stack.pop()
        if not _walks_into(obj):
            continue
        for ref in gc.get_referents(obj):
            if id(ref) in seen:
                continue
            seen.add(id(ref))
            found.append(ref)
            if id(ref) not in module_dicts:  # a function's globals: not its to own
                stack.append(ref)
    return found


def own_type_counts(extra: Iterable[Any] = ()) -> Counter[type]:
    """Live gc-tracked objects by type, memprobe's own left out (see the module docstring).

    memprobe's objects are found first and held alive until the count is made, so an
    id the walk saw is the same object in ``gc.get_objects()``; memprobe's objects made
    after the walk (this count's own) are not in the walk, and are counted.
    """
    own = own_objects(extra)
    objs = gc.get_objects()
    try:
        # Counted in C without Counter(iterable), .subtract or ``+``: they check for a
        # Mapping, and an ABC's first check of a type fills abc's caches (weakrefs)
        # after the heap was read, which the next count would see as grown.
        counts: Counter[type] = Counter()
        _count_elements(counts, map(type, objs))
        is_tracked = gc.is_tracked
        for o in own:
            if is_tracked(o):
                counts[type(o)] -= 1
        for t in [t for t, n in counts.items() if n <= 0]:
            del counts[t]
        return counts
    finally:
        del objs
        own.clear()


def own_ids(extra: Iterable[Any] = ()) -> set[int]:
    """The ids of memprobe's objects now; only for lookups while they are alive (a
    referrer walk that must not follow memprobe's containers)."""
    own = own_objects(extra)
    try:
        return {id(o) for o in own}
    finally:
        own.clear()
