"""The series a leak verdict reads from samples: the keys it judges, in unboxed
columns, and memprobe's own memory at each sample (subtracted from the resident size)."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence

from .._sample import Sample
from ..keys import key_of, make_key, short_key, split_short, split_site_key
from . import _garbage, _kinds, _windows

#: The forecast a live leak check records in the next sample (:meth:`LeakAlarm.check_values`).
FORECAST = "leak/hours_to_oom"
#: What the alarm's capture gave back to the system when it closed (its line's key).
RELEASED = "capture/released_bytes"
#: memprobe's own memory from the memray probe's windows (:func:`sample_series`).
MEMRAY_OWN = "memray/own_bytes"
#: 1 from the sample that opened a memray window to the one before it closed.
MEMRAY_ACTIVE = "memray/window_active"


def judged_keys(prefix: str, metrics: Sequence[str] | None = None,
                sites: bool = True, own: bool = True) -> Callable[[str], bool]:
    """Which keys :func:`analyze_samples` reads: the metrics it judges, the site and
    type keys (with ``sites``), what it subtracts as memprobe's own memory, the
    alarm's capture line (the evidence for the kind where the cheap probes alone ran),
    and the full collections (the evidence on a count of live blocks: :mod:`._garbage`).

    A Prober judging its history reads only these (:meth:`History.select`): the
    rest (growth, gc details, peaks) would make each check's temporary memory
    grow with the history, until the history is full. ``own=False`` leaves out the
    keys of memprobe's own memory.
    """
    wanted = set(metrics if metrics is not None else _kinds.DEFAULT_METRICS)
    wanted.update(("process/rss_bytes", _kinds.TRACED, _kinds.FILTERED, FORECAST,
                   *_windows.WINDOW_KEYS, *_garbage.KEYS))
    if own:
        wanted.update(("tracemalloc/overhead_bytes", "overhead/check_retained_bytes",
                       MEMRAY_OWN))
    seen: dict[str, bool] = {}

    def keep(key: str) -> bool:
        found = seen.get(key)
        if found is None:
            short = short_key(key, prefix)
            found = seen[key] = (short in wanted or _windows.is_window_site(short)
                                 or _windows.is_window_count(short)
                                 or split_short(short)[0] == "capture"
                                 or (sites and site_probe(key, prefix) is not None))
        return found
    return keep


def sample_series(samples: Iterable[Sample], prefix: str, keep: Callable[[str], bool],
                  carry: list[float] | None = None
            ) -> tuple[dict[str, tuple[array[float], array[float], array[float]]], array[float],
                       float]:
    """``{key: (xs, ys, times)}``; the resident sizes less memprobe's own memory.

    While tracemalloc traces, memprobe's own memory is known: tracemalloc's
    (``tracemalloc/overhead_bytes``) and the traced blocks its filters leave out
    (``traced_bytes - filtered_bytes``: memprobe's history, caches and sample
    dicts, importlib's). With a leak alarm, so is what its checks kept
    (``overhead/check_retained_bytes``). Each sample's resident size is judged less the latest of
    these, so a Prober that fills its history is not the user's leak. Also returns
    that own memory at each sample (the estimates only: not the memray windows', read
    off the resident size itself), and the latest of what the checks kept.

    The alarm's capture holds memory while it is open (tracemalloc's traces, the
    snapshot) and frees it when it closes; it then gives the heap's free pages back
    to the system (:data:`RELEASED`, on its line), else the process would reuse them
    unseen and a leak would look levelled off for as long. The resident sizes after
    that line are judged plus what it released, as if the capture's memory were still
    held: the drop is memprobe's, not the program's.

    While a memray window tracks, its tables (and with ``native_traces`` the unwind
    tables it reads) are in the resident size, by an amount known only when it closes:
    the resident sizes read while one was open (from the sample after the one that
    opened it, to the one that closed it) are not judged, and from then on the resident
    sizes are judged less what its windows left (:data:`MEMRAY_OWN`,
    :func:`memprobe.probes.memray.window_own_bytes`).

    :param carry: for a series read in parts (a live alarm reads the samples new
        since its last check): ``[samples read before, tracemalloc's own memory, the
        checks' own memory, the captures' released memory, the memray windows' own
        memory, 1 while a memray window is open]``, read at the start and updated at
        the end.
    """
    out: dict[str, tuple[array[float], array[float], array[float]]] = {}
    overhead_key = make_key(prefix, "tracemalloc", "overhead_bytes")
    traced_key = key_of(prefix, _kinds.TRACED)
    filtered_key = key_of(prefix, _kinds.FILTERED)
    resident = {make_key(prefix, "process", m) for m in _kinds.RESIDENT}
    checks_key = make_key(prefix, "overhead", "check_retained_bytes")
    released_key = key_of(prefix, RELEASED)
    memray_own_key = key_of(prefix, MEMRAY_OWN)
    active_key = key_of(prefix, MEMRAY_ACTIVE)
    first, traced_own, checks_own, released, memray_own, tracking = (
        carry if carry is not None else (0.0,) * 6)
    own = traced_own + checks_own + memray_own
    i = int(first) - 1
    owns: array[float] = array("d")
    for i, s in enumerate(samples, int(first)):
        x = float(s.step if s.step is not None else i)
        values = s.values
        if overhead_key in values:
            traced_own = float(values[overhead_key])
            if traced_key in values and filtered_key in values:
                traced_own += max(0.0, float(values[traced_key]) - float(values[filtered_key]))
            own = traced_own + checks_own + memray_own
        if checks_key in values:
            checks_own = float(values[checks_key])
            own = traced_own + checks_own + memray_own
        if released_key in values:
            released += float(values[released_key])
        inside = tracking  # a memray window was open when this sample began
        if active_key in values:
            tracking = float(values[active_key] == 1)
        if memray_own_key in values:
            memray_own = float(values[memray_own_key])
            own = traced_own + checks_own + memray_own
        owns.append(own - memray_own)
        for k, v in values.items():
            if inside and k in resident:
                continue
            t = out.get(k)
            if t is None:
                if not keep(k):
                    continue
                # Unboxed columns: a check's memory is 24 bytes per point judged.
                t = out[k] = (array("d"), array("d"), array("d"))
            t[0].append(x)
            t[1].append(float(v) - own + released if k in resident else float(v))
            t[2].append(s.time_seconds)
    if carry is not None:
        carry[:] = [float(i + 1), traced_own, checks_own, released, memray_own, tracking]
    return out, owns, checks_own


def site_probe(key: str, prefix: str) -> str | None:
    """The probe of a per-site key judged as a site (``tracemalloc/top/<name>/size_bytes``,
    the sampled heap's ``heap/top/<name>/live_bytes``; a site of Python's allocations:
    ``"tracemalloc"``) or as a type (``objects/top/<name>/count``), else None."""
    found = split_site_key(key, prefix)
    if found is None or found[1].section != "top":
        return None
    probe, stat = found[0], found[1].stat
    if (probe, stat) in (("tracemalloc", "size_bytes"), ("objects", "count")):
        return probe
    if (probe, stat) == ("heap", "live_bytes"):
        return "tracemalloc"
    return None
