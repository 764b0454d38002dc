"""The peak of traced memory while a function runs, and the sites that held it then.

``tracemalloc`` keeps the peak of traced bytes but not what made it: by the
time a test returns, what it briefly needed is freed. A watcher thread reads
the traced bytes every :data:`POLL_SECONDS`; while they are above the limit and
10% above the last capture, it captures the live allocations grouped by the
user's line (``group_by="user"``, memprobe's own files left out). The capture
is a list of ``(site, bytes)``, the growth of each site since the start. A
peak shorter than the polling interval is still measured (tracemalloc's own
peak), but its sites may not be caught; the result says so.

Used by the pytest plugin's ``memprobe_limit_peak`` marker.
"""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._sitestats import default_filters, site_stats
from .._tracing import acquire_tracing, release_tracing

#: How often the watcher reads the traced bytes.
POLL_SECONDS = 0.002


@dataclass
class PeakResult:
    """What one watched call reached.

    :ivar peak_bytes: the peak of traced bytes above the level at the start.
    :ivar sites: ``(site, bytes grown since the start)``, largest first, captured
        when the traced bytes were highest above the limit; empty when no capture ran.
    :ivar captured_bytes: the traced bytes above the start when the sites were captured.
    """

    peak_bytes: int = 0
    sites: list[tuple[str, int]] = field(default_factory=list)
    captured_bytes: int = 0


def watch_peak(fn: Callable[[], Any], limit_bytes: int, *, frames: int = 16,
               top: int = 10) -> tuple[Any, PeakResult]:
    """Call ``fn()`` under tracemalloc; return its result and the :class:`PeakResult`.

    An exception from ``fn`` propagates after the watcher stopped (the result is
    then lost: a failing test fails for its own reason first).
    """
    result = PeakResult()
    filters = default_filters()
    acquire_tracing(frames)
    stop = threading.Event()
    try:
        base = tracemalloc.get_traced_memory()[0]
        base_sites = {s: sz for s, (sz, _) in site_stats("user", filters).items()}
        peak_seen = [0]  # the peak before each capture: a capture allocates (and is traced)

        def capture(current: int) -> None:
            peak_seen[0] = max(peak_seen[0], tracemalloc.get_traced_memory()[1] - base)
            stats = site_stats("user", filters)
            grown = sorted(((s, sz - base_sites.get(s, 0)) for s, (sz, _) in stats.items()),
                           key=lambda kv: -kv[1])
            floor = max(1, current // 100)  # the watcher's own few bytes are not a site
            result.sites = [(s, g) for s, g in grown if g >= floor][:top]
            result.captured_bytes = current
            del stats, grown
            tracemalloc.reset_peak()

        def watcher() -> None:
            while not stop.wait(POLL_SECONDS):
                current = tracemalloc.get_traced_memory()[0] - base
                if current > limit_bytes and current > result.captured_bytes * 1.1:
                    capture(current)

        thread = threading.Thread(target=watcher, name="memprobe-peak", daemon=True)
        tracemalloc.reset_peak()
        thread.start()
        try:
            value = fn()
        finally:
            stop.set()
            thread.join()
        result.peak_bytes = max(peak_seen[0], tracemalloc.get_traced_memory()[1] - base)
        if result.peak_bytes > limit_bytes and not result.sites:
            # The peak came and went between two reads: the sites still alive are all we have.
            current = tracemalloc.get_traced_memory()[0] - base
            if current > 0:
                peak = result.peak_bytes
                capture(current)
                result.peak_bytes = peak
        return value, result
    finally:
        release_tracing()
