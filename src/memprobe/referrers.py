"""Who holds it: referrer chains from retained objects up to what keeps them alive.

Given a type judged leaking (or some objects), :func:`referrer_chains` samples
a few instances and, for each, walks ``gc.get_referrers`` upward, breadth
first, until it reaches a root: a module global, a class attribute, a closure
variable or a frame's local. Each step costs one scan of every gc-tracked
object, after one ``gc.collect()`` (about 0.2 s for a 3-step chain among a
million objects: ``benchmarks/native_costs.py``), so it runs only on demand,
bounded by ``timeout_seconds`` and ``max_depth``; never per sample.
"""

from __future__ import annotations

import functools
import gc
import os
import threading
import time
import types
from collections import deque
from collections.abc import Container, Iterable
from dataclasses import dataclass
from typing import Any

from ._errors import ConfigError, show
from ._own import own_objects
from ._sitestats import memprobe_dirs

_MAX_REPR = 40


def heap_walk_safe() -> bool:
    """Whether this thread may walk the heap (``gc.get_objects()``): only the main thread.

    A walk from another thread holds a reference to every tracked object for a
    moment; when the main thread has a tuple half built (``tuple(generator)``,
    which runs Python code and so lets other threads in) and then resizes it,
    CPython finds a second reference and raises ``SystemError: bad argument to
    internal function`` in the user's code. Seen in an RLlib EnvRunner (dm-tree's
    ``map_structure``) whose sampler thread opened a capture.
    """
    return threading.current_thread() is threading.main_thread()


@dataclass(frozen=True)
class Chain:
    """How one object is kept alive: ``path`` from the object up, ending at ``root``.

    ``path[0]`` describes the object; each later entry a container on the way
    up (``list[3]``, ``Session.cache['k']``). ``root`` names what holds the
    last container (``module app.state global 'HISTORY'``); it is ``""`` when
    the walk ran out of time or depth first (``complete`` is then ``False``).
    """

    path: tuple[str, ...]
    root: str
    complete: bool

    def __str__(self) -> str:
        tail = self.root if self.complete else "(no root found within the limits)"
        return " <- ".join((*self.path, tail))


def type_name(t: type) -> str:
    """``module.QualName`` of a type; builtins without the module."""
    mod = getattr(t, "__module__", None) or ""
    qual = getattr(t, "__qualname__", None) or t.__name__
    return qual if mod in ("builtins", "") else f"{mod}.{qual}"


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def _key_of(container: dict[Any, Any], child: Any) -> Any:
    for k, v in container.items():
        if v is child:
            return k
        if k is child:
            return _KEY
    return _MISSING


_KEY = object()
_MISSING = object()


def _link(container: Any, child: Any) -> str:
    """How ``container`` holds ``child``, for a chain (``list[3]``, ``dict['k']``)."""
    name = type_name(type(container))
    if isinstance(container, (list, tuple)):
        for i, v in enumerate(container):
            if v is child:
                return f"{name}[{i}]"
    elif isinstance(container, dict):
        k = _key_of(container, child)
        if k is _KEY:
            return f"{name} key"
        if k is not _MISSING:
            return f"{name}[{_short(k)}]"
    elif isinstance(container, types.CellType):
        return "cell"
    else:
        # An instance holding child in an attribute (3.11+ keeps attributes inline,
        # so the instance itself is the referrer, not a __dict__).
        namespace = getattr(container, "__dict__", None)
        if isinstance(namespace, dict):
            k = _key_of(namespace, child)
            if isinstance(k, str):
                return f"{name}.{k}"
    return name


def _root(referrer: Any, node: Any, child: Any) -> str | None:
    """The root ``referrer`` is, holding ``node`` (which holds ``child``), or ``None``."""
    if isinstance(referrer, types.ModuleType) and isinstance(node, dict) and (
            referrer.__dict__ is node):
        k = _key_of(node, child)
        name = f" global {k!r}" if isinstance(k, str) else ""
        return f"module {referrer.__name__}{name}"
    if isinstance(referrer, type) and isinstance(node, dict):
        namespace = referrer.__dict__
        for k, v in node.items():
            if v is child and namespace.get(k) is child:
                return f"class attribute {type_name(referrer)}.{k}"
    if (isinstance(referrer, types.FunctionType) and isinstance(node, tuple)
            and referrer.__closure__ is node):
        for i, cell in enumerate(node):
            if cell is child:
                names = referrer.__code__.co_freevars
                name = names[i] if i < len(names) else "?"
                return f"closure variable {name!r} of {referrer.__qualname__}"
    if isinstance(referrer, types.FrameType):
        code = referrer.f_code
        where = f"{code.co_name} at {code.co_filename}:{referrer.f_lineno}"
        for k, v in referrer.f_locals.items():
            if v is node:
                return f"local {k!r} of frame {where}"
        return f"frame {where}"
    return None


def _instance_dict_owner(container: Any, referrers: list[Any]) -> Any:
    """The object whose ``__dict__`` is ``container``, among its referrers."""
    for r in referrers:
        if (not isinstance(r, (type, types.ModuleType))
                and getattr(r, "__dict__", None) is container):
            return r
    return None


def _own_code(filename: str) -> bool:
    """Whether code of ``filename`` is memprobe's (memprobe, memprobe_rllib, memprobe_ray):
    its frames (a capture, a Prober, an adapter's hook that the capture runs inside, with
    the episode it was handed as a local) are never what holds the user's objects."""
    return filename.startswith(_own_prefixes())


@functools.lru_cache(maxsize=1)
def _own_prefixes() -> tuple[str, ...]:
    return tuple(d.rstrip(os.sep) + os.sep for d in memprobe_dirs())


def _frame_locals() -> dict[int, str]:
    """``id(value) -> "local 'name' of frame f at file:line"`` for every running frame.

    A running function's locals are not seen by ``gc.get_referrers`` (3.11+
    keeps them outside any gc-tracked object), so frames are searched directly.
    Only ids are kept: the map holds no reference to the values.
    """
    import sys

    out: dict[int, str] = {}
    for frame in sys._current_frames().values():
        f: types.FrameType | None = frame
        while f is not None:
            code = f.f_code
            if not _own_code(code.co_filename):
                where = f"{code.co_name} at {code.co_filename}:{f.f_lineno}"
                for k, v in f.f_locals.items():
                    out.setdefault(id(v), f"local {k!r} of frame {where}")
            f = f.f_back
    return out


def _ours(obj: Any) -> bool:
    return isinstance(obj, types.FrameType) and _own_code(obj.f_code.co_filename)


def chain_of(
    obj: Any, *, max_depth: int = 12, deadline: float | None = None,
    ignore: Iterable[int] = (),
) -> Chain:
    """The shortest referrer chain from ``obj`` to a root, within ``max_depth`` and ``deadline``.

    :param ignore: ids of containers that are not to be followed (the caller's own).
    """
    mine: set[int] = set(ignore)
    # node id -> (node, id of the node it holds on the way to obj, how); the tuples are ours
    seen: dict[int, tuple[Any, int, str]] = {id(obj): (obj, 0, "")}
    queue: deque[tuple[Any, int]] = deque([(obj, 0)])
    mine.update((id(seen), id(queue)))
    in_frames = _frame_locals()
    try:
        while queue:
            if deadline is not None and time.perf_counter() > deadline:
                break
            node, depth = queue.popleft()
            if depth >= max_depth:
                continue
            held_by_frame = in_frames.get(id(node))
            if held_by_frame is not None:
                return Chain(_path(seen, node, obj), held_by_frame, True)
            referrers = gc.get_referrers(node)
            mine.add(id(referrers))
            # what node holds on the way down to obj (None for obj itself)
            child = None if node is obj else seen[seen[id(node)][1]][0]
            for r in referrers:
                if id(r) in mine or _ours(r):
                    continue
                root = _root(r, node, child)
                if root is not None:
                    # a module's or class's namespace dict is named by the root itself
                    top = child if isinstance(r, (type, types.ModuleType)) else node
                    return Chain(_path(seen, top, obj), root, True)
            for r in referrers:
                if id(r) in mine or _ours(r) or id(r) in seen:
                    continue
                if isinstance(r, (types.ModuleType, types.FrameType)):
                    continue  # a module or frame holding it directly is a root, seen above
                owner = (
                    _instance_dict_owner(r, gc.get_referrers(r))
                    if isinstance(r, dict) and not isinstance(node, types.ModuleType) else None
                )
                if owner is not None and id(owner) not in seen and id(owner) not in mine:
                    # obj.__dict__ -> obj: one step, named by the attribute
                    k = _key_of(r, node)
                    attr = k if isinstance(k, str) else "?"
                    entry = (owner, id(node), f"{type_name(type(owner))}.{attr}")
                    seen[id(owner)] = entry
                    mine.add(id(entry))
                    queue.append((owner, depth + 1))
                    continue
                entry = (r, id(node), _link(r, node))
                seen[id(r)] = entry
                mine.add(id(entry))
                queue.append((r, depth + 1))
            del referrers
        return Chain(_path(seen, None, obj), "", False)
    finally:
        seen.clear()
        queue.clear()


def _path(seen: dict[int, tuple[Any, int, str]], top: Any, obj: Any) -> tuple[str, ...]:
    """The descriptions from ``obj`` up to ``top`` (just ``obj``'s type if ``None``)."""
    steps: list[str] = []
    node_id = id(top) if top is not None else id(obj)
    while node_id != id(obj):
        _node, below, link = seen[node_id]
        steps.append(link)
        node_id = below
    return (type_name(type(obj)), *reversed(steps))


def sample_instances(cls: type | str, n: int, skip: Container[int] = ()) -> list[Any]:
    """Up to ``n`` live gc-tracked instances of exactly ``cls``, oldest first, but
    those whose id is in ``skip``.

    ``cls`` may be a type's name as the ``objects`` probe writes it
    (``module.QualName``, builtins bare), as in a verdict's key.
    """
    found: list[Any] = []
    objs = gc.get_objects()
    names: dict[type, bool] = {}
    try:
        for o in objs:
            t = type(o)
            if isinstance(cls, str):
                hit = names.get(t)
                if hit is None:
                    hit = names[t] = type_name(t) == cls
            else:
                hit = t is cls
            if hit and id(o) not in skip:
                found.append(o)
                if len(found) >= n:
                    break
    finally:
        del objs
    return found


def referrer_chains(
    target: type | str | Iterable[Any],
    *,
    samples: int = 3,
    max_depth: int = 12,
    timeout_seconds: float = 2.0,
) -> list[Chain]:
    """Referrer chains of a few instances of a type, or of the given objects.

    :param target: a type (its instances are sampled from ``gc.get_objects()``), a
        type's name as the ``objects`` probe writes it (``app.Session``), or an
        iterable of objects.
    :param samples: how many instances to explain.
    :param max_depth: longest chain followed.
    :param timeout_seconds: the whole call's time budget; chains not finished
        by then come back with ``complete=False``.
    :returns: one :class:`Chain` per sampled object (fewer if fewer exist).
    """
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        raise ConfigError("referrers.samples", f"must be an int >= 1, got {show(samples)}")
    if not isinstance(max_depth, int) or isinstance(max_depth, bool) or max_depth < 1:
        raise ConfigError("referrers.max_depth", f"must be an int >= 1, got {show(max_depth)}")
    if (not isinstance(timeout_seconds, (int, float)) or isinstance(timeout_seconds, bool)
            or not timeout_seconds > 0):
        raise ConfigError("referrers.timeout_seconds",
                          f"must be a number > 0, got {show(timeout_seconds)}")
    deadline = time.perf_counter() + timeout_seconds
    gc.collect()  # unreachable cycles are nobody's: do not sample them
    # memprobe's own objects (a Prober's history arrays, its caches) are neither the
    # user's instances to explain nor a holder to name; held alive while their ids
    # are in use.
    own = own_objects()
    mine = {id(o) for o in own}
    if isinstance(target, (type, str)):
        objs = sample_instances(target, samples, skip=mine)
    else:
        objs = list(target)[:samples]
    ignore = {id(objs), id(own), id(mine)} | mine
    if isinstance(target, (list, tuple, set, dict)):
        ignore.add(id(target))  # the caller's own container of the objects
    try:
        return [chain_of(o, max_depth=max_depth, deadline=deadline, ignore=ignore)
                for o in objs]
    finally:
        objs.clear()
        own.clear()
