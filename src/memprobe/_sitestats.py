"""Allocation-site statistics from tracemalloc.

``site_stats`` groups the live traced blocks by site (a line, or a traceback
of up to ``nframe`` frames) and returns ``{site: (size_bytes, count)}``,
the same numbers as ``tracemalloc.take_snapshot().filter_traces(filters)
.statistics(group_by)``.

``group_by="user"`` names the site where the user can act on it: when the
allocating line is in a library or the standard library, the nearest frame in
the user's own code comes first, then the library line
(``my_env.py:26--numpy/_core/numeric.py:232``, oldest first as in a
traceback key). It needs tracing with more than one frame; with one, or when
no frame of the traceback is the user's, the allocating line alone is the site.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import gc
import os
import site
import sys
import sysconfig
import tracemalloc
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any

from .keys import format_site

_get_traces: Callable[[], Any] | None
try:
    from _tracemalloc import _get_traces
except ImportError:  # another implementation: the stdlib path
    _get_traces = None


Stats = dict[str, tuple[int, int]]

_first, _second, _third = itemgetter(0), itemgetter(1), itemgetter(2)

_MEMPROBE_DIR = os.path.dirname(os.path.abspath(__file__))
#: memprobe's packages: what they allocate is memprobe's, never the user's.
MEMPROBE_PACKAGES = ("memprobe", "memprobe_rllib", "memprobe_ray")


@functools.lru_cache(maxsize=1)
def memprobe_dirs() -> tuple[str, ...]:
    """The directories of memprobe's packages that are installed (found, not imported)."""
    import importlib.util

    dirs = [_MEMPROBE_DIR]
    for name in MEMPROBE_PACKAGES[1:]:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            dirs += [os.path.abspath(d) for d in spec.submodule_search_locations]
    return tuple(dict.fromkeys(dirs))


def default_filters(exclude: Sequence[str] = ()) -> list[tracemalloc.Filter]:
    """Exclude tracemalloc itself, importlib's bootstrap, every memprobe package
    (:data:`MEMPROBE_PACKAGES`: their files and the code memprobe compiles, named
    ``<memprobe ...>``) and ``exclude`` patterns."""
    pats = [
        tracemalloc.__file__,
        fnmatch.__file__,
        "<frozen importlib._bootstrap>",
        "<frozen importlib._bootstrap_external>",
        "<unknown>",
        *(os.path.join(d, "*") for d in memprobe_dirs()),
        "<memprobe *>",  # code memprobe compiles at run time (flatten plans)
        *exclude,
    ]
    return [tracemalloc.Filter(False, p) for p in pats]


GROUP_BY = ("lineno", "traceback", "user")


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    """Directories whose files are not the user's: site-packages and the standard library."""
    roots: list[str] = []
    for name in ("purelib", "platlib", "stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(name)
        if path:
            roots.append(path)
    try:
        roots += site.getsitepackages()
    except AttributeError:  # a virtualenv's old site.py
        pass
    roots += [p for p in sys.path if p.rstrip(os.sep).endswith(("site-packages", "dist-packages"))]
    return tuple(sorted({os.path.normpath(os.path.abspath(r)) + os.sep for r in roots}))


#: Pseudo-files that hold the user's own code: ``python -c``, standard input, the
#: interactive prompt, IPython and Jupyter cells.
_USER_PSEUDO = ("<string>", "<stdin>", "<console>", "<ipython-input-")


def is_user_pseudo(filename: str) -> bool:
    """True for code the user typed or ran without a file (``python -c``, ``<stdin>``,
    a notebook cell ``<ipython-input-3-...>``)."""
    return filename.startswith(_USER_PSEUDO)


@functools.lru_cache(maxsize=4096)
def is_library(filename: str) -> bool:
    """True for a file in site-packages or the standard library, or a pseudo-file
    other than the user's own (``<frozen ...>``; not ``<string>``, ``<stdin>``
    or a notebook cell, see :func:`is_user_pseudo`): code that is not the user's own."""
    if filename.startswith("<"):
        return not is_user_pseudo(filename)
    return os.path.abspath(filename).startswith(_library_roots())


#: memprobe's packages: an allocation whose nearest non-library frame is in one of
#: them is memprobe's own (its Counter in the stdlib, its lists), never the user's.
_OWN_DIRS = tuple(
    os.path.join(os.path.dirname(_MEMPROBE_DIR), name) + os.sep for name in MEMPROBE_PACKAGES
)


def _own(filename: str) -> bool:
    return filename.startswith(_OWN_DIRS) or filename.startswith("<memprobe ")


def user_site(tb: Sequence[tuple[str, int]]) -> str | None:
    """The site key of a raw traceback (most recent frame first) for ``group_by="user"``,
    or None when the allocation is memprobe's own (made for it in a library).

    The user's frame is the nearest one in a file of the user's; code without a
    file (``<string>``, ``<stdin>``, a notebook cell) is the user's too, unless a
    file of the user's calls it (a library's generated ``__init__`` compiled as
    ``<string>``). :class:`SiteGrouper` keeps the result per traceback
    (``is_library`` and the path shortening are cached per file name).
    """
    top = tb[0]
    here = format_site(top[0], top[1])
    pseudo: tuple[str, int] | None = None
    for i, (filename, lineno) in enumerate(tb):
        if is_library(filename):
            continue
        if _own(filename):
            if pseudo is None:
                return None
            break
        if is_user_pseudo(filename):
            if pseudo is None:
                pseudo = (filename, lineno)
            continue
        return here if i == 0 else f"{format_site(filename, lineno)}--{here}"
    if pseudo is None or pseudo == top:
        return here
    return f"{format_site(*pseudo)}--{here}"


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
    """The stdlib's own filter logic (Snapshot._filter_trace), for one traceback.

    The one reach-in into tracemalloc's private API: ``Filter._match`` and
    ``DomainFilter._match`` (checked on CPython 3.11 to 3.13), so that a filter means
    here what it means to ``Snapshot.filter_traces``.
    """
    # Any: _match is private to the stdlib's Filter and DomainFilter, absent from BaseFilter.
    include: list[Any] = [f for f in filters if f.inclusive]
    exclude: list[Any] = [f for f in filters if not f.inclusive]

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
    by_name = all(f.lineno is None for f in filters)  # type: ignore[attr-defined]
    cache: dict[Any, bool] = {}

    def keep_cached(domain: int, tb: Any) -> bool:
        k = tb[0][0] if by_name else tb[0]
        r = cache.get(k)
        if r is None:
            r = cache[k] = keep(0, (tb[0],))
        return r

    return keep_cached


class SiteGrouper:
    """Groups raw traces by site, and remembers each traceback's site for the next call:
    a probe that samples again and again sees mostly the same tracebacks.

    Working out a traceback's site (the filters, the walk to the user's frame, the
    formatting) allocates, and while tracing each allocation is itself traced, at
    microseconds each with 4 frames: with numpy imported (about 6,000 distinct
    tracebacks) that was most of a sample's cost (docs/performance.md). The
    traceback tuples kept are ``_get_traces()``'s own, which tracemalloc does not
    trace (about 400 bytes each with 4 frames). Tracebacks whose blocks were all
    freed would pile up: when the kept ones pass twice the number seen in the call
    that filled the memory afresh (plus :data:`SPARE_TRACEBACKS`), it is emptied
    and filled again from the next call.
    """

    def __init__(
        self, group_by: str = "lineno", filters: Sequence[tracemalloc.BaseFilter] = ()
    ) -> None:
        if group_by not in GROUP_BY:
            raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
        self.group_by = group_by
        self.filters = list(filters)
        self._by_domain = _domain_dependent(self.filters)
        self._sites = _Sites(_site_function(group_by, self.filters, self._by_domain))
        self._max_sites = 0  # the first call fills afresh
        self._last: Stats = {}  # the previous call's stats, whose tuples are reused

    def stats(self, traces: Iterable[tuple[Any, ...]]) -> Stats:
        """Group raw traces ``(domain, size, traceback, total_nframe)`` by site.

        No Python object is built per trace: a chain of C iterators looks up each
        trace's site (worked out once per traceback) and appends its size (an int
        that already exists, in the trace) to the list of its site; per site the
        count is then ``len`` and the size ``sum`` (in C). A ``Counter`` would
        allocate a new int per block once a count passes 256.
        """
        if not isinstance(traces, (list, tuple)):
            traces = list(traces)  # read twice below
        afresh = len(self._sites) >= self._max_sites
        if afresh:
            self._sites.clear()
        tbs = map(_third, traces)
        keys_of = zip(map(_first, traces), tbs) if self._by_domain else tbs
        groups: defaultdict[str | None, list[int]] = defaultdict(list)
        # for each trace: groups[sites[key]].append(size), all in C; maxlen=0 drops the Nones.
        deque(map(list.append, map(groups.__getitem__, map(self._sites.__getitem__, keys_of)),
                  map(_second, traces)), maxlen=0)
        if afresh:
            self._max_sites = 2 * len(self._sites) + SPARE_TRACEBACKS
        groups.pop(None, None)  # filtered out, or memprobe's own
        self._last = out = _site_totals(groups, self._last)
        return out

    def site_stats(self) -> Stats:
        """Current live allocations grouped by site. Empty when tracemalloc is not tracing.

        Uses the raw traces (``_tracemalloc._get_traces``); falls back to
        ``take_snapshot().statistics()`` if the private function is missing.
        """
        if not tracemalloc.is_tracing():
            return {}
        if _get_traces is None:
            return stdlib_site_stats(self.group_by, self.filters)  # type: ignore[arg-type]
        with collector_paused():  # the copy and its grouping, and freeing the copy
            return self.stats(_get_traces())


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off inside the block, as ``timeit`` turns it off, and back on
    after it if it was on: around memprobe's own work that allocates much.

    A leak check and a batch of tiers count the memory they keep across their work:
    the young collections their allocations set off free the program's cyclic garbage
    made since the last one, which would count as memory the work gave back (a healthy
    loop making 20 reference cycles per step lost ~80 KiB of "kept" per check, and the
    resident size judged less it climbed: tests/test_alarm_cycles.py).

    The copy of the traces is a tuple per block and per frame, each tracked by the
    collector: with torch imported (500,000 traced blocks) the collections they set off,
    full ones among them over every object of the heap, took a third of the copy's time,
    and they were counted as the program's in the ``gc`` probe. A thread that
    switches the collector on or off while a sample runs may find it back in the state
    it had before the sample."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _site_totals(groups: dict[Any, list[int]], last: Stats) -> Stats:
    """``{site: (sum(sizes), len(sizes))}``, with ``last``'s tuple where a site's totals
    did not change.

    While tracing, every object built here is traced, at about a microsecond each: a
    new tuple and int for each of 30,000 sites (torch imported) took a tenth of a
    second. Most sites keep their totals from one sample to the next, and a site of one
    block has the size of that block (the int that is already in the trace)."""
    out: Stats = {}
    get = last.get
    for key, sizes in groups.items():
        count = len(sizes)
        size = sizes[0] if count == 1 else sum(sizes)
        old = get(key)
        if old is not None and old[0] == size and old[1] == count:
            out[key] = old
        else:
            out[key] = (size, count)
    return out


#: Tracebacks a :class:`SiteGrouper` may keep beyond twice those it last filled afresh.
SPARE_TRACEBACKS = 1000


class _Sites(dict):  # type: ignore[type-arg]
    """``{traceback: site}``, a site worked out at the first lookup."""

    __slots__ = ("site_of",)

    def __init__(self, site_of: Callable[[Any], str | None]) -> None:
        super().__init__()
        self.site_of = site_of

    def __missing__(self, key: Any) -> str | None:
        site = self[key] = self.site_of(key)
        return site


def _site_function(
    group_by: str, filters: Sequence[tracemalloc.BaseFilter], by_domain: bool
) -> Callable[[Any], str | None]:
    """The site of one raw traceback (``(domain, traceback)`` with domain filters), or
    None when the filters or ``group_by="user"`` leave it out."""
    keep = _keep(filters) if filters else None

    def site_of(key: Any) -> str | None:
        domain, tb = key if by_domain else (0, key)
        if keep is not None and not keep(domain, tb):
            return None
        if not tb:
            return ""
        if group_by == "lineno":
            return format_site(tb[0][0], tb[0][1])
        if group_by == "user":
            return user_site(tb)
        return "--".join(format_site(f, ln) for f, ln in reversed(tb))

    return site_of


def stats_from_traces(
    traces: Iterable[tuple[Any, ...]],
    group_by: str = "lineno",
    filters: Sequence[tracemalloc.BaseFilter] = (),
) -> Stats:
    """Group raw traces ``(domain, size, traceback, total_nframe)`` by site, once.

    ``traceback`` is the raw tuple of ``(filename, lineno)`` that
    ``_tracemalloc._get_traces()`` returns, most recent call first.
    Equal to ``Snapshot(traces, n).filter_traces(filters).statistics(group_by)``
    mapped through :func:`site_key`. To group again and again, keep a
    :class:`SiteGrouper`.
    """
    return SiteGrouper(group_by, filters).stats(traces)


def site_stats(
    group_by: str = "lineno", filters: Sequence[tracemalloc.Filter] = ()
) -> Stats:
    """Current live allocations grouped by site, once (:meth:`SiteGrouper.site_stats`)."""
    return SiteGrouper(group_by, filters).site_stats()


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
    user = group_by == "user"
    for st in snap.statistics("traceback" if user else group_by):
        if user:  # a Traceback iterates oldest first; user_site wants the raw order
            user_key = user_site(tuple((f.filename, f.lineno) for f in reversed(st.traceback)))
            if user_key is None:
                continue
            key = user_key
        else:
            key = site_key(st.traceback if group_by == "traceback" else st.traceback[:1])
        size, count = out.get(key, (0, 0))
        out[key] = (size + st.size, count + st.count)
    return out
