"""The Prober's deep capture: when its leak alarm fires, name the culprits in this process.

A Prober on the cheap probes (process, gc) sees *that* memory grows, not
*where*. When its alarm fires for a metric whose verdict names no culprit,
:class:`AlarmCapture` opens a :class:`memprobe.capture.CulpritCapture` in this
process (a tracemalloc window, an objects count, a memray window when asked)
for ``duration_seconds``. The Prober checks :meth:`AlarmCapture.due` at the end
of each sample; when due, the capture is closed and its culprits are:

- written to the Prober's sinks as one extra line (same time, step and pid),
  with bounded keys ``<prefix>/capture/<probe>/<section>/<site>/<stat>``
  (``tracemalloc/survivors/...``, ``memray/top/...``, ``objects/growth/...``)
  and ``<prefix>/capture/{duration,start,finish}_seconds``, and
  ``<prefix>/capture/released_bytes`` (:func:`release_freed`);
- put into the alarm (:attr:`memprobe.LeakAlarm.culprits`) and into the
  verdicts that fired, in :attr:`memprobe.LeakAlarm.latest` and every later
  check: their ``culprits`` start with the captured sites and types.

When a verdict that alarms already names a leaking type (kind ``objects``), no
window is opened: the capture is the referrer chains of a few of that type's
instances (:func:`memprobe.referrers.referrer_chains`, within
``holders_timeout_seconds``), walked at the alarm and written the same way, the
chains as the line's :data:`HOLDERS` field (one per line of its text) and in
the verdicts' ``holders``.

One capture per process (per Prober): the first alarm that needs one. A
forked child starts with none.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError, show
from .._flatten import SiteKeyCap, flatten
from .._sample import Number
from ..keys import format_culprit, is_library_site, make_key, prefix_path

if TYPE_CHECKING:
    from ..capture import CulpritCapture, Culprits
    from ._verdicts import Verdict

#: Options of :class:`memprobe.capture.CulpritCapture` that ``capture_on_leak`` takes.
CAPTURE_OPTIONS = frozenset({
    "duration_seconds", "native", "native_traces", "objects", "holders", "top",
    "max_overhead_bytes", "holders_timeout_seconds",
})
#: The Prober's defaults: a memray window only when asked (``native=None`` or True).
DEFAULTS: Mapping[str, Any] = {"duration_seconds": 10.0, "native": False}


def check_capture_option(value: Any) -> dict[str, Any] | None:
    """``capture_on_leak=``: True (the defaults), False / None (off), or a mapping of
    :data:`CAPTURE_OPTIONS`. Returns the options, or None when off."""
    if value is None or value is False:
        return None
    if value is True:
        options: dict[str, Any] = {}
    elif isinstance(value, Mapping):
        for k in value:
            if k not in CAPTURE_OPTIONS:
                raise ConfigError(f"capture_on_leak.{k}", "unknown option (options: "
                                  f"{', '.join(sorted(CAPTURE_OPTIONS))})")
        options = dict(value)
    else:
        raise ConfigError("capture_on_leak", f"must be a bool or a mapping of options, "
                          f"got {show(value)}")
    options = {**DEFAULTS, **options}
    from ..capture import CulpritCapture

    CulpritCapture(**options)  # checks every value now, in the caller
    return options


def captured_names(culprits: Culprits, n: int = 5) -> tuple[str, ...]:
    """The culprits a verdict shows: Python lines (the user's first), then native sites,
    then types; a chain of frames as reports show it (``app.py:12 → numpy/…:232``, as the
    verdicts' own culprits), not as the capture's keys spell it (``app.py:12--numpy/…``)."""
    sites = sorted((s for s, _, _ in culprits.python_sites), key=is_library_site)
    names = [format_culprit(s) for s in sites[:3]]
    names += [format_culprit(s.site) for s in culprits.native_sites[:2]]
    names += [t for t, _ in culprits.types[:2]]
    return tuple(dict.fromkeys(names))[:n]


#: Share of the verdict's growth over the capture that kept bytes must reach to explain it.
_KEPT_SHARE = 0.25
#: Blocks a user's line must keep over the capture to be named the holder of native memory
#: the capture could not trace (one kept by chance is not a pattern).
_HOLDER_BLOCKS = 2


def captured_kind(culprits: Culprits, verdict: Verdict,
                  samples: int) -> tuple[str, str] | None:
    """The kind of a bytes verdict with no kind of its own, from what the capture saw kept
    over its ``samples`` against the growth at the verdict's rate per sample; with a note
    saying so. Python when its kept bytes explain the growth; native when memray's do,
    or when they do not but the user's lines keep objects (which hold memory tracemalloc
    does not see). None when the verdict has its kind, or the capture saw too little to tell."""
    if verdict.kind is not None or verdict.unit != "bytes":
        return None
    grown = verdict.slope_per_step * samples
    if grown <= 0:
        return None
    python = sum(b for _, b, _ in culprits.python_sites)
    native = sum(s.size_bytes for s in culprits.native_sites)
    basis = (f"from the capture: {python} B of Python allocations and {native} B of native "
             f"ones kept over {samples} samples, against {grown:.0f} B grown")
    if python >= _KEPT_SHARE * grown:
        return "python", f"Python allocations; {basis}"
    if culprits.native_sites and native >= _KEPT_SHARE * grown:
        return "native", f"native memory; {basis}"
    held = [s for s, _, count in culprits.python_sites
            if count >= _HOLDER_BLOCKS and not is_library_site(s)]
    if held and not culprits.native_sites:
        # A kept ``torch.Tensor``, a C buffer's address: a few traced bytes at the user's
        # line, and the memory they hold is not traced.
        return "native", (f"native memory held by objects the user's lines keep "
                          f"({', '.join(format_culprit(s) for s in held[:3])}); {basis}")
    return None


def release_freed(before_bytes: int) -> int:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim(0)``, where
    there is one) once the capture has freed what it held; the resident bytes less
    than ``before_bytes`` (the resident size before it closed), 0 when unknown.

    A capture holds megabytes while it is open (tracemalloc's traces, the snapshot
    and its statistics) and frees them when it closes. Kept by the allocator, those
    pages would take the program's next allocations, a leak's included, with no
    growth of the resident size until they are used up: the leak that opened the
    capture would look levelled off for that long (measured in an RLlib EnvRunner
    leaking 2 KiB per step: 37 samples of flat resident size after a capture).
    Given back, the leak's allocations fault in new pages, and the drop is added
    back to the later samples' resident sizes (:func:`memprobe.leak._series.sample_series`).
    """
    from ..probes.malloc import trim_free_pages
    from ..probes.process import resident_bytes

    trim_free_pages()
    after = resident_bytes()
    return max(0, before_bytes - after) if before_bytes and after else 0


def held_type(fired: list[Verdict]) -> str | None:
    """The leaking type whose holders to walk: the first culprit that is a class of a
    module (``app.Session``, not ``dict``) of a verdict of kind ``objects``."""
    for v in fired:
        if v.kind == "objects":
            for name in v.culprits:
                if "." in name:
                    return name
    return None


class AlarmCapture:
    """The capture a Prober opens when its alarm fires, and what it found."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)
        self._capture: CulpritCapture | None = None
        #: The keys whose alarm opened the capture.
        self.keys: tuple[str, ...] = ()
        #: What the capture found (None until it closes).
        self.culprits: Culprits | None = None
        self.done = False
        self._start_seconds = 0.0
        self._held: Culprits | None = None  # holders walked at the alarm, not yet written
        #: Samples taken while the capture was open (each asks :meth:`due`).
        self.samples = 0

    @property
    def active(self) -> bool:
        """Whether a capture is open."""
        return self._capture is not None

    def maybe_start(self, fired: list[Verdict]) -> bool:
        """Open the capture for verdicts that just alarmed, unless a capture was already
        made. When one names a leaking type, walk its holders now (due at once);
        when one names another culprit (a tracemalloc probe did), do nothing."""
        if self.done or self._capture is not None or self._held is not None or not fired:
            return False
        name = held_type(fired)
        from ..referrers import heap_walk_safe

        if name is not None and self.options.get("holders", True) and heap_walk_safe():
            return self._walk_holders(name, fired)
        if any(v.culprits for v in fired):
            return False
        from ..capture import CulpritCapture

        t0 = time.perf_counter()
        capture = CulpritCapture(**self.options)
        capture.start()
        self._capture = capture
        self._start_seconds = time.perf_counter() - t0
        self.keys = tuple(v.key for v in fired)
        self.samples = 0
        return True

    def _walk_holders(self, name: str, fired: list[Verdict]) -> bool:
        """Referrer chains of two instances of the type ``name``, walked now within
        ``holders_timeout_seconds``; the next :meth:`finish` writes them."""
        from ..capture import CulpritCapture, Culprits
        from ..referrers import referrer_chains

        t0 = time.perf_counter()
        timeout = self.options.get("holders_timeout_seconds",
                                   CulpritCapture.holders_timeout_seconds)
        chains = referrer_chains(name, samples=2, timeout_seconds=timeout)
        self._start_seconds = time.perf_counter() - t0
        self._held = Culprits(holders=tuple(chains),
                              notes=(f"holders of {name}, the type judged leaking",))
        self.keys = tuple(v.key for v in fired if v.kind == "objects")
        return True

    def due(self) -> bool:
        """Whether the open capture should be closed now (the holders walked at the
        alarm: at once)."""
        if self._held is not None:
            return True
        capture = self._capture
        if capture is None:
            return False
        self.samples += 1
        return capture.due()

    def finish(self, prefix: str) -> dict[str, Number]:
        """Close the capture; the flat values (keys under ``<prefix>/capture/``) of the
        line it adds to the sinks."""
        capture, self._capture = self._capture, None
        held, self._held = self._held, None
        self.done = True
        from ..probes.process import resident_bytes

        before = resident_bytes()
        t0 = time.perf_counter()
        if held is not None:
            culprits = held
        else:
            assert capture is not None
            try:
                culprits = capture.finish()
            finally:
                capture.abandon()  # a no-op once finished; releases tracing if finish() failed
        released = release_freed(before)
        finish_seconds = time.perf_counter() - t0
        self.culprits = culprits
        top = int(self.options.get("top", 10))
        values = flatten(culprits.sections(), prefix=prefix_path(prefix) + "capture",
                         site_key_cap=SiteKeyCap(3 * top))
        values[make_key(prefix, "capture", "duration_seconds")] = culprits.duration_seconds
        values[make_key(prefix, "capture", "start_seconds")] = self._start_seconds
        values[make_key(prefix, "capture", "finish_seconds")] = finish_seconds
        values[make_key(prefix, "capture", "released_bytes")] = released
        return values

    def abandon(self) -> None:
        """Close an open capture without a result (the Prober stops, or forked)."""
        capture, self._capture = self._capture, None
        self._held = None
        if capture is not None:
            capture.abandon()

    def reset(self) -> None:
        """Forget everything (a forked child makes its own capture)."""
        self.abandon()
        self.keys = ()
        self.culprits = None
        self.done = False
