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
from collections.abc import Sequence

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
    """``file.py:line`` for one frame; frames joined by ``--``, most recent first."""
    return "--".join(format_site(f.filename, f.lineno) for f in frames)


def site_stats(
    group_by: str = "lineno", filters: Sequence[tracemalloc.Filter] = ()
) -> Stats:
    """Current live allocations grouped by site. Empty when tracemalloc is not tracing."""
    if not tracemalloc.is_tracing():
        return {}
    snap = tracemalloc.take_snapshot()
    if filters:
        snap = snap.filter_traces(list(filters))
    out: Stats = {}
    for st in snap.statistics(group_by):
        key = site_key(st.traceback if group_by == "traceback" else st.traceback[:1])
        size, count = out.get(key, (0, 0))
        out[key] = (size + st.size, count + st.count)
    return out
