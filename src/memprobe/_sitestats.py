"""Allocation-site statistics from tracemalloc.

``site_stats`` groups the live traced blocks by site (a line, or a traceback
of up to ``nframe`` frames) and returns ``{site: (size_bytes, count)}``,
the same numbers as ``tracemalloc.take_snapshot().filter_traces(filters)
.statistics(group_by)``.
"""

from __future__ import annotations

import fnmatch
import os
import tracemalloc
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

try:
    from _tracemalloc import _get_traces
except ImportError:  # another implementation: the stdlib path
    _get_traces = None

from ._flatten import format_site

Stats = dict[str, tuple[int, int]]

_MEMPROBE_DIR = os.path.dirname(os.path.abspath(__file__))


def default_filters(exclude: Sequence[str] = ()) -> list[tracemalloc.Filter]:
    """Exclude tracemalloc itself, importlib's bootstrap, memprobe and ``exclude`` patterns."""
    pats = [
        tracemalloc.__file__,
        fnmatch.__file__,
        "<frozen importlib._bootstrap>",
        "<frozen importlib._bootstrap_external>",
        "<unknown>",
        os.path.join(_MEMPROBE_DIR, "*"),
        *exclude,
    ]
    return [tracemalloc.Filter(False, p) for p in pats]


def site_key(frames: Sequence[tracemalloc.Frame]) -> str:
    """``file.py:line`` for one frame; frames joined by ``--`` in
    ``tracemalloc.Traceback`` order (oldest first)."""
    return "--".join(format_site(f.filename, f.lineno) for f in frames)


def _domain_dependent(filters: Sequence[tracemalloc.BaseFilter]) -> bool:
    return any(
        isinstance(f, tracemalloc.DomainFilter) or getattr(f, "domain", None) is not None
        for f in filters
    )


def _keep(filters: Sequence[tracemalloc.BaseFilter]) -> Callable[[int, Any], bool]:
    """The stdlib's own filter logic (Snapshot._filter_trace), for one traceback."""
    include = [f for f in filters if f.inclusive]
    exclude = [f for f in filters if not f.inclusive]

    def keep(domain: int, tb: Any) -> bool:
        trace = (domain, 0, tb, 0)
        if include and not any(f._match(trace) for f in include):
            return False
        return not (exclude and any(not f._match(trace) for f in exclude))

    simple = all(
        type(f) is tracemalloc.Filter and not f.all_frames and f.domain is None for f in filters
    )
    if not simple:
        return keep
    # The decision depends on the most recent frame only; with no lineno in any
    # filter, on its filename only: decide once per filename (fnmatch is slow).
    by_name = all(f.lineno is None for f in filters)
    cache: dict[Any, bool] = {}

    def keep_cached(domain: int, tb: Any) -> bool:
        k = tb[0][0] if by_name else tb[0]
        r = cache.get(k)
        if r is None:
            r = cache[k] = keep(0, (tb[0],))
        return r

    return keep_cached


def stats_from_traces(
    traces: Iterable[tuple[int, int, Any, int]],
    group_by: str = "lineno",
    filters: Sequence[tracemalloc.BaseFilter] = (),
) -> Stats:
    """Group raw traces ``(domain, size, traceback, total_nframe)`` by site.

    ``traceback`` is the raw tuple of ``(filename, lineno)`` that
    ``_tracemalloc._get_traces()`` returns, most recent call first. No
    Python object is built per trace: sizes are summed per distinct raw
    traceback in one loop and blocks counted by ``Counter`` (in C); the
    filters and the site keys are then computed once per distinct traceback.
    Equal to ``Snapshot(traces, n).filter_traces(filters).statistics(group_by)``
    mapped through :func:`site_key`.
    """
    if group_by not in ("lineno", "traceback"):
        raise ValueError(f"group_by must be 'lineno' or 'traceback', got {group_by!r}")
    by_domain = _domain_dependent(filters)
    # Counter over the raw trace tuples themselves runs in C and allocates
    # nothing per trace (work done here is traced too: fewer allocations,
    # less slowdown); identical blocks (same domain, size, traceback) are common.
    sizes: defaultdict[Any, int] = defaultdict(int)
    counts: defaultdict[Any, int] = defaultdict(int)
    for (domain, size, tb, _), n in Counter(traces).items():
        k = (domain, tb) if by_domain else tb
        sizes[k] += size * n
        counts[k] += n
    keep = _keep(filters) if filters else None
    keys: dict[Any, str] = {}
    out: Stats = {}
    for k, size in sizes.items():
        domain, tb = k if by_domain else (0, k)
        if keep is not None and not keep(domain, tb):
            continue
        frames = tb if group_by == "traceback" else tb[:1]
        key = keys.get(frames)
        if key is None:
            key = keys[frames] = "--".join(format_site(f, ln) for f, ln in reversed(frames))
        n = counts[k]
        prev = out.get(key)
        out[key] = (size, n) if prev is None else (prev[0] + size, prev[1] + n)
    return out


def site_stats(
    group_by: str = "lineno", filters: Sequence[tracemalloc.Filter] = ()
) -> Stats:
    """Current live allocations grouped by site. Empty when tracemalloc is not tracing.

    Uses the raw traces (``_tracemalloc._get_traces``) and :func:`stats_from_traces`;
    falls back to ``take_snapshot().statistics()`` if the private function is missing.
    """
    if not tracemalloc.is_tracing():
        return {}
    if _get_traces is not None:
        return stats_from_traces(_get_traces(), group_by, filters)
    return stdlib_site_stats(group_by, filters)


def stdlib_site_stats(
    group_by: str = "lineno", filters: Sequence[tracemalloc.Filter] = ()
) -> Stats:
    """The same numbers through the public API (slow: one object per trace)."""
    if not tracemalloc.is_tracing():
        return {}
    return stats_from_snapshot(tracemalloc.take_snapshot(), group_by, filters)


def stats_from_snapshot(
    snap: tracemalloc.Snapshot, group_by: str = "lineno",
    filters: Sequence[tracemalloc.BaseFilter] = (),
) -> Stats:
    """``snap.filter_traces(filters).statistics(group_by)`` as ``{site: (size, count)}``."""
    if filters:
        snap = snap.filter_traces(list(filters))  # type: ignore[arg-type]
    out: Stats = {}
    for st in snap.statistics(group_by):
        key = site_key(st.traceback if group_by == "traceback" else st.traceback[:1])
        size, count = out.get(key, (0, 0))
        out[key] = (size + st.size, count + st.count)
    return out
