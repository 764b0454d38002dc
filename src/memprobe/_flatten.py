"""Flattening nested probe results into stable, sanitized metric keys."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._errors import KeyCollisionError, MetricValueError
from ._sample import Number
from .keys import sanitize_key

#: How deep a probe's result may nest before it is rejected.
MAX_DEPTH = 12

OTHER = "other"

#: The range of int values: what 64-bit metric backends store (int64 and uint64).
#: A larger int (a hostile probe's ``10**5000``) is an error, not a value that
#: breaks the JSONL sink or a backend later.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1


class SiteMap(dict):  # type: ignore[type-arg]
    """A mapping whose keys are *site keys*: open-ended names such as allocation sites
    and type names.

    A probe returns one where the set of keys is not fixed in advance. The
    Prober's site-key cap (``Prober(max_site_keys=N)``, a :class:`SiteKeyCap`)
    applies to the keys of every SiteMap: at most N of them hold a key at a time,
    the rest are summed into ``.../other/...``.
    """


class SiteKeyCap:
    """The site-key cap: at most ``max_keys`` site keys hold a slot (are emitted as
    themselves) at a time; the others go to ``other``.

    Slots go to keys first come, and a key keeps its slot while its map (the
    :class:`SiteMap` it is a key of, e.g. ``.../tracemalloc/top``) goes on emitting
    it. A slot whose key was absent from the last :attr:`STALE_EMISSIONS` emissions
    of its map is given to a key its own map emitted, and the cap refused, in the last
    :attr:`PERSIST_EMISSIONS` emissions in a row: a site that stays in a probe's top
    after the slots went to the passing sites of an earlier phase (the imports at the
    start of a program that is sampled from its first line, as ``memprobe run`` does).
    At most ``max_keys`` slots change hands over the cap's life, so at most
    ``2 * max_keys`` distinct site keys are ever emitted.
    """

    #: Emissions of its map a key may be absent from and keep its slot.
    STALE_EMISSIONS = 10
    #: Emissions of its map in a row a refused key must be in to take a stale slot.
    PERSIST_EMISSIONS = 3

    def __init__(self, max_keys: int) -> None:
        self.max_keys = max_keys
        # key with a slot -> its map, and the emission of that map it was last in
        self._map_of: dict[str, str] = {}
        self._seen: dict[str, int] = {}
        self._emissions: dict[str, int] = {}  # map -> its emissions so far
        # map -> {key refused at the map's latest emission: emissions refused in a row}
        self._refused: dict[str, dict[str, int]] = {}
        self._refusing: dict[str, dict[str, int]] = {}  # the same, for the open emission
        #: Slots that changed hands so far (at most ``max_keys``).
        self.replaced = 0

    def begin(self, parent: str) -> None:
        """An emission of the map ``parent`` starts: its keys are offered next."""
        self._emissions[parent] = self._emissions.get(parent, 0) + 1
        self._refusing[parent] = {}

    def admit(self, key: str, parent: str = "") -> bool:
        """True if ``key`` (of the map ``parent``) may be emitted as itself; False if
        it goes to ``other``."""
        seen = self._seen
        if key in seen:
            seen[key] = self._emissions.get(parent, 0)
            return True
        if len(seen) < self.max_keys:
            seen[key] = self._emissions.get(parent, 0)
            self._map_of[key] = parent
            return True
        refusing = self._refusing.get(parent)
        if refusing is not None:
            refusing[key] = self._refused.get(parent, {}).get(key, 0) + 1
        return False

    def end(self, parent: str) -> None:
        """The emission of ``parent`` is over: keys refused in enough of its emissions
        in a row take the slots of stale keys, from its next emission on."""
        refusing = self._refusing.pop(parent, None)
        if refusing is None:
            return
        if refusing:
            self._refused[parent] = refusing
        else:
            self._refused.pop(parent, None)
        room = self.max_keys - self.replaced
        ready = [k for k, n in refusing.items() if n >= self.PERSIST_EMISSIONS]
        if not ready or room <= 0:
            return
        emissions, map_of = self._emissions, self._map_of
        absent = sorted(((emissions.get(map_of[k], 0) - at, k) for k, at in self._seen.items()),
                        reverse=True)
        stale = [k for gap, k in absent if gap >= self.STALE_EMISSIONS]
        ready.sort(key=lambda k: -refusing[k])  # the longest refused first
        for new, old in zip(ready[:room], stale):
            del self._seen[old], map_of[old]
            self._seen[new] = emissions[parent]
            map_of[new] = parent
            del refusing[new]
            self.replaced += 1

    def __len__(self) -> int:
        return len(self._seen)


def check_number(key: str, value: Any) -> Number:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        if INT_MIN <= value <= INT_MAX:
            return value
        raise MetricValueError(
            key, f"int of {value.bit_length()} bits is outside the 64-bit range of metric values"
        )
    if isinstance(value, float):
        if not math.isfinite(value):
            raise MetricValueError(key, f"value {value!r} is not finite")
        return value
    if isinstance(value, numbers.Integral):
        return check_number(key, int(value))
    if isinstance(value, numbers.Real):
        f = float(value)
        if not math.isfinite(f):
            raise MetricValueError(key, f"value {value!r} is not finite")
        return f
    raise MetricValueError(
        key, f"value of type {type(value).__name__} is not a number (int or float)"
    )


def check_row(keys: Sequence[str], row: Sequence[Any]) -> Sequence[Number]:
    """A probe's row of values, checked as :func:`check_number` checks each: ``row``
    itself when every value is an ``int`` in range or a finite ``float``, else a new
    tuple of the values converted (a bool, a numpy number).

    :raises MetricValueError: a value is not a finite number; names its key.
    """
    for v in row:
        t = type(v)
        if t is int:
            if not INT_MIN <= v <= INT_MAX:
                break
        elif t is not float or v - v != 0:  # inf - inf and nan - nan are nan
            break
    else:
        return row
    return tuple(map(check_number, keys, row))


def _part(key: Any, where: str) -> str:
    if isinstance(key, str):
        return sanitize_key(key)
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key)
    raise MetricValueError(where or "<root>", f"key {key!r} is not a string")


def flatten(
    data: Mapping[str, Any],
    *,
    prefix: str = "memprobe",
    sep: str = "/",
    site_key_cap: SiteKeyCap | None = None,
    max_keys: int | None = None,
) -> dict[str, Number]:
    """Flatten nested probe results into ``{"<prefix>/<probe>/<metric>": number}``.

    Mappings nest by key, sequences by index. Keys are sanitized with
    :func:`sanitize_key` and sorted at each level, so the output order is
    deterministic. Values must be finite ``int`` or ``float`` (bools become 0/1).

    :param data: ``{probe_name: result}``, each result a nested mapping.
    :param prefix: the first key component; ``""`` for none.
    :param sep: the separator between components.
    :param site_key_cap: caps the distinct site keys (those under every :class:`SiteMap`).
    :param max_keys: give up (``MetricValueError``) as soon as the result, or
        one container in ``data``, has more entries than this.
    :raises MetricValueError: a value is not a finite number, or a key is not a
        string; the message names the key.
    :raises KeyCollisionError: two inputs sanitize to the same key; names both.
    """
    if type(data) is dict:
        ck = (prefix, sep, tuple(data))
        plan = _PLANS.get(ck)
        if plan is not None:
            fast: dict[str, Number] = {}
            if _run_plan(data, plan, fast):
                return fast
    out: dict[str, Number] = {}
    sources: dict[str, str] = {}
    root = sanitize_key(prefix) if prefix else ""
    _walk(data, root, "", sep, out, sources, site_key_cap, 0, max_keys)
    if type(data) is dict:
        plan = _make_plan(data, out, root, sep, 0)
        if plan is not None:
            if len(_PLANS) >= _MAX_PLANS:
                _PLANS.clear()
            _PLANS[ck] = plan
    return out


# -- the fast path -------------------------------------------------------------
# A probe that returns a mapping returns the same shape sample after sample. The
# first flatten of a shape goes through _walk (sanitizing, sorting, collision
# checks) and records a *plan*: for each plain dict, its keys in order and, sorted
# as _walk sorts them, each child's output key or sub-plan. Later calls with the
# same shape check the shape (each dict's keys) and the value types, and copy.
# Anything unusual (a SiteMap, a sequence, a non-str key, a bool, a non-finite or
# non-int/float value, a different shape) misses and takes _walk again, which
# produces the same output or raises the same error.

Plan = tuple[tuple[Any, ...], list[tuple[str, str | None, Any]]]

_PLANS: dict[tuple[str, str, tuple[Any, ...]], Plan] = {}
_MAX_PLANS = 256
_isfinite = math.isfinite


def _make_plan(node: Any, out: dict[str, Number], key: str, sep: str, depth: int) -> Plan | None:
    if type(node) is not dict or depth > MAX_DEPTH:
        return None
    items: list[tuple[str, str | None, Any]] = []
    for k in node:
        if type(k) is not str:
            return None
    for k in sorted(node, key=str):
        part = sanitize_key(k)
        child_key = f"{key}{sep}{part}" if key else part
        v = node[k]
        t = type(v)
        if t is int or t is float:
            if child_key not in out or out[child_key] != v:
                return None
            items.append((k, child_key, None))
        elif t is dict:
            sub = _make_plan(v, out, child_key, sep, depth + 1)
            if sub is None:
                return None
            items.append((k, None, sub))
        else:
            return None
    return (tuple(node), items)


def _run_plan(node: dict[Any, Any], plan: Plan, out: dict[str, Number]) -> bool:
    """Copy ``node``'s values into ``out`` by ``plan``; False (``out`` partly filled)
    when ``node`` does not have the plan's shape or holds a value _walk would convert
    or refuse."""
    keys, items = plan
    if tuple(node) != keys:
        return False
    for k, okey, sub in items:
        v = node[k]
        if okey is not None:
            t = type(v)
            if (t is int and INT_MIN <= v <= INT_MAX) or (t is float and _isfinite(v)):
                out[okey] = v
            else:
                return False
        elif type(v) is not dict or not _run_plan(v, sub, out):
            return False
    return True


def _emit(
    out: dict[str, Number], sources: dict[str, str], key: str, src: str, value: Number
) -> None:
    prev = sources.get(key)
    if prev is not None:
        raise KeyCollisionError(key, (prev, src))
    sources[key] = src
    out[key] = value


def _items(node: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(node, Mapping):
        try:
            return sorted(node.items(), key=lambda kv: str(kv[0]))
        except Exception:  # keys whose str() fails
            return list(node.items())
    return enumerate(node)


def _is_container(node: Any) -> bool:
    return isinstance(node, Mapping) or (
        isinstance(node, Sequence) and not isinstance(node, (str, bytes, bytearray))
    )


def _walk(
    node: Any,
    key: str,
    src: str,
    sep: str,
    out: dict[str, Number],
    sources: dict[str, str],
    cap: SiteKeyCap | None,
    depth: int,
    limit: int | None = None,
) -> None:
    if depth > MAX_DEPTH:
        raise MetricValueError(src, f"nested deeper than {MAX_DEPTH} levels")
    if limit is not None and len(node) > limit:
        raise MetricValueError(src or "<root>", f"has {len(node)} entries, over max_keys={limit}")
    capped = cap is not None and isinstance(node, SiteMap)
    if capped:
        cap.begin(key)  # type: ignore[union-attr]
    other: dict[str, Number] = {}
    for k, v in _items(node):
        part = _part(k, src)
        child_key = f"{key}{sep}{part}" if key else part
        child_src = f"{src}{sep}{k}" if src else str(k)
        if capped and not cap.admit(child_key, key):  # type: ignore[union-attr]
            sub: dict[str, Number] = {}
            _walk({"": v} if not _is_container(v) else v, "", child_src, sep, sub, {}, None,
                  depth + 1)
            for rel, val in sub.items():
                other[rel] = other.get(rel, 0) + val
            continue
        if _is_container(v):
            _walk(v, child_key, child_src, sep, out, sources, cap, depth + 1, limit)
        else:
            _emit(out, sources, child_key, child_src, check_number(child_src, v))
            if limit is not None and len(out) > limit:
                raise MetricValueError(src or "<root>", f"flattens to over max_keys={limit} keys")
    if other:
        base = f"{key}{sep}{OTHER}" if key else OTHER
        other_src = f"{src}{sep}{OTHER}"
        for rel, val in other.items():
            k2 = f"{base}{sep}{rel}" if rel and rel != "_" else base
            if k2 in out:  # a real site literally named "other": add to it
                val += out[k2]
                del sources[k2], out[k2]
            # A sum of in-range ints can leave the 64-bit range: checked like any value.
            _emit(out, sources, k2, other_src, check_number(other_src, val))
    if capped:
        cap.end(key)  # type: ignore[union-attr]
