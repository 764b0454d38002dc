"""Kinds of growth: which kind of leak a growing metric is, told from the metrics beside it.

A leak is one of the kinds in :data:`KINDS`. Each judged metric says something
on its own (``process/num_fds`` grows: file descriptors); a whole-process
memory metric (rss, uss, pss, vms) is explained by the others: Python's traced
bytes, malloc's in-use and free bytes (the ``malloc`` probe), file-backed
mappings (``smaps/file_bytes``, or ``process/shared_bytes``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from typing import Protocol

from .._registry import builtin_declarations, growth_kinds, judged_metrics
from ..keys import ends_in_c_frame, format_culprit, is_library_site, is_library_type, split_short
from ._windows import EXPLAINED_SHARE, WindowEvidence

__all__ = ["DEFAULT_METRICS", "FILTERED", "KINDS", "TRACED", "classify", "rank"]

#: Each kind of growth in plain words, most telling first (the order of :func:`rank`).
KINDS: Mapping[str, str] = {
    "fds": "file descriptors: files, sockets or pipes opened and never closed",
    "mmap": "memory-mapped files: file-backed mappings grow",
    "python": "Python allocations: the bytes tracemalloc traces grow",
    "objects": "retained objects: the number of live objects grows",
    "native": "native memory: memory in use grows outside Python's view (C extensions, malloc)",
    "fragmentation": (
        "allocator hold or fragmentation: rss grows while malloc's in-use bytes stay flat "
        "and the free bytes it holds grow"
    ),
    "threads": "threads started and never ended",
}

#: Process metrics that count resident memory, tracemalloc's own tables included.
RESIDENT = ("rss_bytes", "uss_bytes", "pss_bytes")
FILTERED = "tracemalloc/filtered_bytes"
TRACED = "tracemalloc/traced_bytes"
#: The sampled heap's estimate of Python's live bytes (the ``heap`` probe).
HEAP = "heap/live_bytes"
#: Live blocks of Python's small-object allocator (``gc`` probe, ``blocks=True``).
BLOCKS = "gc/allocated_blocks"
#: Counts of live objects (besides the objects probe's ``objects/...``).
OBJECT_COUNTS = ("objects/total_count", BLOCKS)

#: Metrics judged by :func:`memprobe.analyze_samples` (without prefix), besides
#: the per-site and per-type series: those the built-in probes declare
#: ``judged=True`` (:class:`memprobe.Metric`). ``tracemalloc/traced_bytes`` is judged
#: only when ``tracemalloc/filtered_bytes`` is absent: traced bytes include
#: memprobe's own allocations.
#: The order reports list them in: whole-process memory first, then what explains it.
_READING_ORDER = ("process", "heap", "tracemalloc", "objects", "gc", "malloc", "smaps")
DEFAULT_METRICS = tuple(sorted(
    judged_metrics(builtin_declarations()),
    key=lambda m: _READING_ORDER.index(split_short(m)[0])))

_FILE_BACKED = ("smaps/file_bytes", "process/shared_bytes")
#: The kind each judged metric's growth is on its own (its declaration's ``growth``).
_OWN_KIND = growth_kinds(builtin_declarations())
_ORDER = {k: i for i, k in enumerate(KINDS)}


class _Judged(Protocol):
    @property
    def status(self) -> str: ...
    @property
    def slope_per_step(self) -> float: ...
    @property
    def kind(self) -> str | None: ...
    @property
    def metric(self) -> str: ...
    @property
    def unit(self) -> str: ...


def rank(v: _Judged) -> tuple[int, int, int]:
    """Sort key: the resident size first (its kind weighs every other growth), then a
    count of live objects after the bytes metrics (a kept tensor grows the objects'
    count and, more tellingly, the native bytes they hold), then the most telling
    kind (fds before the memory they cost)."""
    counted_objects = v.kind == "objects" and v.unit != "bytes"
    return (v.metric != "process/rss_bytes", counted_objects,
            _ORDER.get(v.kind or "", len(_ORDER)))


#: Sites growing slightly named for a Python leak none of whose sites leaks alone.
_SPREAD_SITES = 5

#: Said when the site named first has no frame of the user's code.
NO_USER_FRAME = ("no frame of the user's code among the frames traced for {site}: "
                 "trace more (tracemalloc nframe) to name the line that keeps it")


def _python(sites: Sequence[str], types: Sequence[str]) -> tuple[str, tuple[str, ...], str]:
    """Python allocations; retained objects when the fastest-growing type is a class of
    the user's (``my_mod.Cache``), not a builtin's or a library's (``dict``,
    ``re.Pattern``, ``numpy.ndarray``: the user's line that keeps them says more). When
    the first site is a library's line alone, the note says the user's frame was not
    reached."""
    if types and "." in types[0] and not is_library_type(types[0]):
        return "objects", (*types, *sites), KINDS["objects"]
    note = KINDS["python"]
    if sites and is_library_site(sites[0]):
        note += "; " + NO_USER_FRAME.format(site=sites[0])
    return "python", (*sites, *types), note


def _blocks_per_step(by_metric: Mapping[str, _Judged]) -> float | None:
    """Python's live blocks' growth per step (``gc/allocated_blocks``), None when not
    counted."""
    blocks = by_metric.get(BLOCKS)
    return None if blocks is None or blocks.status == "insufficient" else blocks.slope_per_step


def _grows(v: _Judged | None, than: float = 0.0) -> bool:
    """``v`` grows (a leak, or slightly) at no less than ``than`` per step."""
    return v is not None and v.status in ("leak", "slight") and v.slope_per_step >= than


#: Why a growth of malloc's bytes in use is said native when tracemalloc did not run: what
#: it rests on, and how to tell it from Python's.
UNTOLD = ("not told from Python's: malloc's bytes in use grow, and so do they for Python's "
          "objects over 512 bytes (numpy arrays, long strings); the tracemalloc probe, "
          "which did not run, tells them apart")

#: Said of memray's sites read without their C stacks.
NATIVE_TRACES_HINT = ("the memray probe's native_traces=True (probes={'memray': "
                      "{'native_traces': True}}) names the C function")
#: Said of a native leak where the memray probe did not run: the alarm's capture reads the
#: C stack.
CAPTURE_NATIVE_HINT = ("capture_on_leak={'native': True, 'native_traces': True} names the "
                       "C function")


def native_hint(windows: Sequence[WindowEvidence] = ()) -> str:
    """How to get the native stack of a native leak: the memray sites, or the way to them."""
    if any(e.probe == "memray" for e in windows):
        return ""
    try:
        installed = importlib.util.find_spec("memray") is not None
    except (ImportError, ValueError):
        installed = False
    if installed:
        return CAPTURE_NATIVE_HINT
    return 'pip install "pymemprobe[native]"; then ' + CAPTURE_NATIVE_HINT


def _native(metric: str, rate: float, windows: Sequence[WindowEvidence],
            why: str) -> tuple[str, tuple[str, ...], str]:
    """Native memory: memray's sites when its windows ran, else the way to get them."""
    note = f"native memory; {why}" if why else KINDS["native"]
    native = next((e for e in windows if e.probe == "memray" and e.sites), None)
    if native is not None:
        named = tuple(format_culprit(s) for s, _ in native.sites[:5])
        note = f"{note}; {native.describe(rate)}"
        if not any(ends_in_c_frame(n) for n in named):
            note += f"; {NATIVE_TRACES_HINT}"  # Python frames alone: memray read no C stack
        return "native", named, note
    hint = native_hint(windows)
    return "native", (), f"{note}; {hint}" if hint else note


def _held(metric: str, rate: float, windows: Sequence[WindowEvidence], holders: Sequence[str],
          types: Sequence[str], traced: WindowEvidence | None, grow: bool = True,
          ) -> tuple[str, tuple[str, ...], str] | None:
    """Native memory that retained objects own: live objects grow, Python's traced bytes
    do not account for the metric's growth, and a line of the user's makes objects that
    grow or survive (a kept ``torch.Tensor``'s storage, a C extension's buffers). Named
    by memray's sites when its windows ran, else by the user's lines and the types.
    None without a user's line: a library's blocks in flight (episodes not yet
    returned) survive every window of a healthy process too, and hold nothing.
    ``grow=False``: the live objects were not seen to grow (the count is too coarse for a
    few objects per step), but the user's lines make objects that survive every window.
    The user's surviving lines come from every tracemalloc view: the windows, then the
    alarm's capture (a line that keeps a few bytes a step, a C buffer's address, holds
    what it keeps over the capture's many steps); the note says which one named them."""
    seen = tuple(dict.fromkeys(e for e in (traced, *windows)
                               if e is not None and e.probe == "tracemalloc"))
    named = [(format_culprit(s), e) for e in seen for s, _ in e.sites if not is_library_site(s)]
    holders = (*holders, *(s for s, _ in named))
    sites = tuple(s for s in dict.fromkeys(holders) if not is_library_site(s))
    if not sites:
        return None
    traced = next((e for _, e in named), traced)  # the view that named the user's lines
    if not grow:  # the evidence after the way to the C stack, which a text report shows
        kind, culprits, note = _native(metric, rate, windows,
                                       "held by objects the user's lines make")
        note += f"; {traced.describe(rate)}" if traced is not None else ""
        return kind, culprits or (*sites[:5], *types), note
    why = ("retained objects hold it: live objects grow, Python's traced bytes do not "
           "account for the growth")
    if traced is not None:
        why += f" ({traced.describe(rate)})"
    kind, culprits, note = _native(metric, rate, windows, why)
    return kind, culprits or (*sites[:5], *types), note


#: Bytes per block kept at the user's lines from which what they keep is data (numpy
#: copies, long strings: beyond CPython's small-object allocator, 512 bytes), not the
#: many small objects a count of live objects is about (a user's record of 100 bytes).
_DATA_BLOCK_BYTES = 512


def _what_counted_objects_hold(metric: str, by_metric: Mapping[str, _Judged],
                               windows: Sequence[WindowEvidence]) -> tuple[str, str] | None:
    """The kind and note of a count of live objects (``metric``) that grows by blocks
    the user's lines keep (a quarter of its growth or more survives the tracing windows
    there): what those objects hold, against the resident size's growth per step,
    whatever its verdict (a Learner's rss rises in steps, as freed heap is reused
    between them, and reads "levelled off" while its live blocks grow steadily).
    Python allocations when the bytes kept at the user's lines are a quarter of it or
    more and large per block (numpy copies: their data is traced); native memory held by
    those objects when they are less (a kept ``torch.Tensor`` is a few dozen traced
    bytes, its storage is not). None when the user's lines keep too few of the blocks (a
    library's objects the user's list keeps, made inside the library's calls), when
    they keep small objects that explain the growth (the count's own kind: retained
    objects), or without a resident size."""
    traced = next((e for e in windows if e.probe == "tracemalloc"), None)
    rss = by_metric.get("process/rss_bytes")
    count = by_metric.get(metric)
    if traced is None or rss is None or rss.status == "insufficient" or count is None:
        return None
    if traced.user_count_per_step < EXPLAINED_SHARE * count.slope_per_step:
        return None
    rate = max(rss.slope_per_step, 0.0)
    said = f"{traced.describe(rate)} (process/rss_bytes {rss.status})"
    if traced.users_explain(rate):
        if traced.user_per_step < _DATA_BLOCK_BYTES * traced.user_count_per_step:
            return None
        return "python", f"{KINDS['python'].split(':')[0]}; {said}"
    return "native", f"native memory held by objects the user's lines keep; {said}"


def classify(
    metric: str,
    by_metric: Mapping[str, _Judged],
    sites: Sequence[str],
    types: Sequence[str],
    windows: Sequence[WindowEvidence] = (),
    holders: Sequence[str] = (),
) -> tuple[str | None, tuple[str, ...], str]:
    """The kind of growth of the leaking ``metric``, its culprits and a note in plain words.

    The note says what the kind rests on when it is not the metric's own.

    :param by_metric: every verdict of the same process, by metric without prefix.
    :param sites: the leaking tracemalloc sites, fastest first.
    :param types: the leaking object types, fastest first.
    :param windows: what windowed probes saw (:func:`memprobe.leak._windows.window_evidence`):
        with a windowed tracemalloc probe, whether Python's growth explains the
        metric's is judged from the bytes that survive its windows, not from
        traced bytes, which are then no series.
    :param holders: the tracemalloc sites growing at all (a leak or slightly), fastest
        first: where retained objects that own native memory are made (a
        ``torch.Tensor`` is a few dozen traced bytes, its storage is not traced).
    """
    own = _OWN_KIND.get(metric)
    # A Python leak spread over several sites (``re.compile`` allocates at a dozen
    # lines) can grow past the floor while none of its sites does: the sites growing
    # slightly are then what it is made of.
    py_sites = tuple(sites) or tuple(holders[:_SPREAD_SITES])
    if own == "python":
        return _python(py_sites, types)
    if own == "objects":
        # A count of live objects names their types, then the user's lines whose blocks
        # survive the tracing windows (where they are made: a Learner's kept batch
        # copies, judged on one sample per train() iteration, may grow the count alone).
        made = (format_culprit(s) for e in windows if e.probe == "tracemalloc"
                for s, _ in e.sites if not is_library_site(s))
        culprits = tuple(dict.fromkeys((*types, *made)))
        users_class = bool(types) and "." in types[0] and not is_library_type(types[0])
        held = None if users_class else _what_counted_objects_hold(metric, by_metric, windows)
        if held is not None:
            return held[0], culprits, held[1]
        return own, culprits, KINDS[own]
    v = by_metric[metric]
    rate = v.slope_per_step
    if own is not None and own != "native":
        return own, (), KINDS[own]
    heap = by_metric.get(HEAP)
    if heap is not None and _grows(heap, EXPLAINED_SHARE * rate):
        # The sampled heap sees every Python allocation, at any moment: when its live
        # bytes grow by a share of the metric's growth, Python's allocations explain it,
        # and its sites name where (no window or capture needed).
        kind, culprits, note = _python(py_sites, types)
        share = heap.slope_per_step / rate if rate > 0 else 1.0
        return kind, culprits, (f"{note.split(':')[0]}: the sampled heap grows by "
                                f"{min(share, 1.0):.0%} of it")
    if metric == "malloc/free_bytes":
        if _grows(by_metric.get("malloc/in_use_bytes"), 0.5 * rate):
            return _native(metric, rate, windows, "malloc's in-use bytes grow")
        return "fragmentation", (), KINDS["fragmentation"]
    traced = next((e for e in windows if e.probe == "tracemalloc"), None)
    py = None if traced is not None else by_metric.get(FILTERED) or by_metric.get(TRACED)
    objects_grow = bool(types) or _grows(by_metric.get("objects/total_count")) or _grows(
        by_metric.get(BLOCKS))
    if own == "native" and _grows(py, 0.5 * rate):
        return _python(py_sites, types)  # malloc's bytes in use, Python's allocations among them
    untold = UNTOLD if py is None and traced is None else ""  # no view of Python's bytes
    if own == "native":  # malloc's bytes in use: held by objects the user's lines make?
        held = _held(metric, rate, windows, holders, types, traced) \
            if objects_grow and not _grows(py, 0.1 * rate) and (
                py is not None or traced is not None) else None
        return held or _native(metric, rate, windows, untold)
    in_use = by_metric.get("malloc/in_use_bytes")
    # A process that serves a leak from heap it freed before grows its resident size by
    # less than the leak; malloc's bytes in use grow by all of it. Python's share is
    # judged against the larger.
    kept = max(rate, in_use.slope_per_step) if _grows(in_use) else rate
    if _grows(py, 0.1 * kept):
        return _python(py_sites, types)
    blocks = _blocks_per_step(by_metric)
    # The alarm's capture where there is one, else the windows: its longer view tells a
    # library's blocks in flight from what it keeps, and a container's resize (a list of
    # kept addresses reallocated at the user's line: tens of KiB in one block) from the
    # growth. Two short windows, one holding a resize, made a native leak python.
    traced_views = [e for e in windows if e.probe == "tracemalloc"]
    captured = [e for e in traced_views if e.source == "capture"]
    for seen in dict.fromkeys(captured or traced_views):
        if seen.explains(rate, blocks_per_step=blocks):
            kind, culprits, _ = _python(
                (*(format_culprit(s) for s, _ in seen.sites), *py_sites), types)
            return kind, culprits, f"{KINDS[kind].split(':')[0]}; {seen.describe(rate)}"
    if any(_grows(by_metric.get(m), 0.5 * rate) for m in _FILE_BACKED):
        return "mmap", (), KINDS["mmap"]
    if in_use is not None:
        if _grows(in_use, 0.1 * rate):
            held = _held(metric, rate, windows, holders, types, traced) \
                if objects_grow and (py is not None or traced is not None) else None
            return held or _native(metric, rate, windows, untold or "malloc's in-use bytes grow")
        if _grows(by_metric.get("malloc/free_bytes")):
            return "fragmentation", (), KINDS["fragmentation"]
    rss = by_metric.get("process/rss_bytes")
    if metric == "process/vms_bytes" and rss is not None and not _grows(rss):
        return "mmap", (), ("address space grows but resident memory does not: "
                            "mappings made and not touched")
    if _grows(by_metric.get("process/num_fds")):
        return "fds", (), KINDS["fds"]
    if objects_grow:
        held = _held(metric, rate, windows, holders, types, traced) \
            if py is not None or traced is not None else None
        if held is not None:
            return held
        if traced is not None and not types:
            # Live blocks grow, but what survives the windows at the user's lines is
            # too little to be the growth, and a library's survivors are not kept.
            return _native(metric, rate, windows, traced.describe(rate))
        return "objects", tuple(types), KINDS["objects"]
    if traced is not None:
        held = _held(metric, rate, windows, (), types, traced, grow=False)
        return held or _native(metric, rate, windows, traced.describe(rate))
    if py is not None:
        return _native(metric, rate, windows, "rss grew but tracemalloc's traced bytes did not "
                       f"({py.slope_per_step:+.4g}/{py.step})")
    native = next((e for e in windows if e.probe == "memray"), None)
    if native is not None and native.explains(rate):
        return _native(metric, rate, windows, "")  # what memray's windows saw kept
    if heap is not None and heap.status != "insufficient":
        return _native(metric, rate, windows, "the sampled heap of Python's allocations "
                       "does not grow with it")
    return None, (), _add_probes(by_metric)


#: The probes that tell a resident growth's kind, each by a metric it judges.
_TELLING = (("tracemalloc", FILTERED), ("objects", "objects/total_count"),
            ("malloc", "malloc/in_use_bytes"))


def _add_probes(by_metric: Mapping[str, _Judged]) -> str:
    """Which probes to add to tell the kind: those that did not run (numpy's arrays are
    not gc-tracked, so the objects probe sees none of them; Python's small objects are
    not malloc's), with what the ones that ran saw."""
    ran = [p for p, m in _TELLING if m in by_metric]
    missing = [p for p, m in _TELLING if m not in by_metric]
    if not missing:
        return "no probe here tells which kind of memory grows"
    names = missing[0] if len(missing) == 1 else (
        f"{', '.join(missing[:-1])} or {missing[-1]}")
    text = f"add the {names} probe to tell which kind of memory"
    if ran:
        text += f" (the {' and '.join(ran)} probe{'s' if len(ran) > 1 else ''} saw no growth)"
    return text
