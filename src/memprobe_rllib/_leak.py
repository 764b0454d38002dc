"""The live leak verdict of one process, as RLlib keys and a warning naming the culprit.

The verdicts come from the Prober's own leak alarm (``Prober(on_leak=...,
leak_check_every=..., leak_confirmations=...)``): one schedule, the same data
as ``prober.report()`` and ``memprobe report`` on the process's JSONL.
:class:`LeakState` turns them into a fixed set of keys, logged at every flush
with the latest verdict:

- ``<prefix>/leak/suspect``: 1 while an alarm is raised in this process, else 0
  (raised at ``leak_confirmations`` leaking checks in a row; lowered at twice as
  many healthy ones once the metric has fallen behind the pace it alarmed at, so
  that a leak's stall on freed memory it reuses does not lower it; raised again at
  ``leak_confirmations`` leaking ones);
- ``<prefix>/leak/rate_per_hour``: growth per hour, in bytes, of the worst alarmed
  bytes metric (an fd or objects leak has its rate in its own metric's key);
- ``<prefix>/leak/<probe>/<metric>/rate_per_hour`` and ``.../suspect`` for each
  judged metric the process has (:data:`JUDGED`);
- ``<prefix>/leak/hours_to_oom``: hours until the resident size reaches the nearest
  memory limit at the rate judged (:func:`memprobe.oom_headroom`), -1 when it is not
  judged leaking or no limit can be read;
- ``<prefix>/leak/env_runner_<i>``: 1 while EnvRunner ``i`` is alarmed (reduce max);
- ``<prefix>/leak/culprit/<where>/rate_per_hour`` for at most
  :data:`MAX_CULPRITS` culprits named in this process (a ``file.py:line``, a
  type, ``native`` or ``fds``); it appears with the alarm that names it, and
  is logged at every flush after that (at 0 once the alarm's capture replaced a
  ``native`` guessed without evidence).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import memprobe
from memprobe import LeakWarning
from memprobe import keys as mkeys
from memprobe.keys import is_library_type

from ._results import warn

#: The metrics whose verdicts get keys of their own (when the process has them).
JUDGED = (
    "process/rss_bytes",
    "process/num_fds",
    "tracemalloc/filtered_bytes",
    "objects/total_count",
    "gc/allocated_blocks",
)
#: Culprit keys a process may add (bounded: one key per name, never reused).
MAX_CULPRITS = 3
#: A library's culprit beside the user's is held to this share of their slowest rate.
_CONTEXT_SHARE = 0.5
#: Culprits of equal rates are ranked in the verdicts' order, each at this share of
#: the one before it.
_TIE_SHARE = 0.999
#: A Python site is named for a bytes leak when the bytes that survive a
#: tracing window are at least this share of the metric's growth per sample.
_PYTHON_SHARE = 0.25


def survivor_sites(history: Sequence[Any], prefix: str,
                   windows: int = 5) -> list[tuple[str, float]]:
    """Sites whose blocks survive most of the last ``windows`` tracing windows.

    :returns: ``[(site, median surviving bytes per window)]``, largest first.
    """
    total_key = mkeys.make_key(prefix, "tracemalloc", "survivors_bytes")
    closed = [s.values for s in reversed(history) if total_key in s.values][:windows]
    if not closed:
        return []
    sizes: dict[str, list[float]] = {}
    for values in closed:
        for key, v in values.items():
            found = mkeys.split_site_key(key, prefix)
            if found is not None and found[0] == "tracemalloc":
                section, site, stat = found[1]
                if section == "survivors" and stat == "size_bytes" and site != "other":
                    sizes.setdefault(site, []).append(float(v))
    need = (len(closed) + 1) // 2
    ranked = [(site, statistics.median(vs + [0.0] * (len(closed) - len(vs))))
              for site, vs in sizes.items() if len(vs) >= need]
    return sorted((r for r in ranked if r[1] > 0), key=lambda r: -r[1])


def _native_stacks(names: Sequence[str]) -> list[str]:
    """The culprits among ``names`` that are a native stack of the user's code: its line
    down to a C function (``app.py:12 → leaky_alloc``), as reports show them."""
    return [chain for n in names if " → " in (chain := mkeys.format_culprit(n))
            and not mkeys.is_library_site(n) and mkeys.ends_in_c_frame(n)]


def _is_site(name: str) -> bool:
    """A ``file.py:line`` site (or ``a.py:1 → b.py:2``), not a type, ``native`` or ``fds``."""
    return ".py:" in name or name.startswith("<")


def user_survivor_sites(history: Sequence[Any], prefix: str) -> list[tuple[str, float]]:
    """:func:`survivor_sites` in the user's own code (not the stdlib's or a package's)."""
    return [(site, b) for site, b in survivor_sites(history, prefix)
            if not mkeys.is_library_site(site)]


def growing_types(history: Sequence[Any], prefix: str) -> list[str]:
    """Object types whose live count grew most between the first and the last third
    of the samples that counted objects, fastest first."""
    total_key = mkeys.make_key(prefix, "objects", "total_count")
    counted = [s.values for s in history if total_key in s.values]
    if len(counted) < 3:
        return []
    third = max(1, len(counted) // 3)

    def level(part: Sequence[Any]) -> dict[str, float]:
        out: dict[str, list[float]] = {}
        for values in part:
            for key, v in values.items():
                found = mkeys.split_site_key(key, prefix)
                if found is not None and found[0] == "objects" and found[1].section == "top" \
                        and found[1].stat == "count":
                    out.setdefault(found[1].name, []).append(float(v))
        return {name: statistics.median(vs) for name, vs in out.items()}

    early, late = level(counted[:third]), level(counted[-third:])
    grew = sorted(((late[t] - early.get(t, 0.0), t) for t in late if t != "other"), reverse=True)
    return [t for g, t in grew if g > 0]


def culprits_of(verdict: Any, history: Sequence[Any], prefix: str) -> tuple[str, ...]:
    """Where a leaking metric's growth comes from, most likely first.

    ``fds`` for file descriptors; the verdict's own culprits (growing sites or
    types); else the sites whose blocks survive the tracing windows, when they
    account for the growth; else ``native`` for a bytes metric (memory Python
    did not allocate: C extensions, ``malloc``).
    """
    metric = mkeys.short_key(verdict.key, prefix)
    kind = getattr(verdict, "kind", None)
    if metric.endswith("num_fds") or kind == "fds":
        return ("fds",)
    if verdict.culprits:
        return tuple(verdict.culprits[:MAX_CULPRITS])
    if kind == "threads":
        return ("threads",)
    # Windowed tracing: the verdict cannot see Python's growth across windows; the
    # blocks that survive each window can. Library sites survive every window in a
    # healthy EnvRunner too (the episodes in flight until sample() returns): only the
    # user's own sites are named here.
    if mkeys.split_short(metric)[0] == "objects" or metric == "gc/allocated_blocks":
        types = growing_types(history, prefix)
        if types:
            return tuple(types[:MAX_CULPRITS])
        # Too few walks of the heap to tell the type yet (the alarm's capture counts
        # them): the user's lines whose objects survive the windows.
        return tuple(site for site, _ in user_survivor_sites(history, prefix)[:MAX_CULPRITS])
    if verdict.unit == "bytes":
        sites = user_survivor_sites(history, prefix)
        per_step = max(float(verdict.slope_per_step), 1.0)
        if sites and sum(b for _, b in sites[:MAX_CULPRITS]) >= _PYTHON_SHARE * per_step:
            return tuple(site for site, _ in sites[:MAX_CULPRITS])
        return ("native",)
    return ()


def culprit_rates(names: Sequence[str], rate: float, captured: Any) -> dict[str, float]:
    """Each culprit's share of the metric's ``rate`` (per hour), in the order ``names``
    ranks them: a line's share is its part of the bytes the alarm's capture saw kept at
    the lines named (``captured``: its :class:`memprobe.capture.Culprits`); a name with no
    size of its own (a type), or with no capture, gets the rate of the name before it.
    The rates never rise down the list, so a reader ranking the culprit keys by their
    values reads the order the verdict gave."""
    sizes: dict[str, float] = {}
    for site, size, _ in getattr(captured, "python_sites", ()) or ():
        sizes[mkeys.format_culprit(site)] = float(size)
    for native in getattr(captured, "native_sites", ()) or ():
        sizes.setdefault(mkeys.format_culprit(native.site), float(native.size_bytes))
    total = sum(sizes.get(n, 0.0) for n in names)
    out: dict[str, float] = {}
    previous = rate
    for name in names:
        share = rate * sizes[name] / total if total > 0 and sizes.get(name) else previous
        out[name] = previous = min(share, previous)
    return out


class LeakState:
    """The alarm's latest verdicts for one process, as keys (see the module docstring)."""

    def __init__(self, prefix: str, role: str, index: int | None, step_name: str) -> None:
        self.prefix = prefix
        self.role = role
        self.index = index
        self.step_name = step_name  # what one sample is, for the warning
        self.alarmed: dict[str, Any] = {}  # key -> its alarming Verdict
        # key -> checks in a row that judged it otherwise than its alarm stands
        # (healthy while alarmed, leaking while lowered)
        self._streak: dict[str, int] = {}
        self.latest: dict[str, Any] = {}  # key -> its latest Verdict
        self.culprits: dict[str, float] = {}  # name -> rate per hour
        # "native" said of a bytes metric no Python evidence judged (the cheap probes
        # alone): the alarm's capture, when it names Python sites, replaces it.
        self._guessed: set[str] = set()
        # Guesses the capture replaced: their keys stay in the results at 0 (RLlib keeps
        # a key's last value once logged), so that a dashboard does not blame them still.
        self._dropped: set[str] = set()
        # key -> (its level, the time and its rate per second when it alarmed)
        self._pace: dict[str, tuple[float, float, float]] = {}
        self.warned = False
        self.judged: tuple[str, ...] | None = None
        self.prober: Any = None
        self._seen_report: Any = None
        # Culprits a bytes metric's verdict named: their rates (bytes per hour) rank
        # them; a count's verdict (blocks, objects per hour) names its own at its rate.
        self._by_bytes: set[str] = set()
        # The user's native stacks down to a C function that the latest memray window
        # saw surviving, largest first: its close may have left the history (200
        # samples) long before the alarm, when the overhead budget spaces windows out.
        self._native_stacks: tuple[str, ...] = ()

    # -- fed by the Prober's alarm ------------------------------------------------------
    def on_leak(self, verdict: Any) -> None:
        """The Prober's ``on_leak``: a metric confirmed leaking."""
        self._raise(verdict)
        history = self.prober.history if self.prober is not None else ()
        names = culprits_of(verdict, history, self.prefix)
        if names == ("native",) and self._native_stacks:
            names = self._native_stacks  # what the latest memray window saw kept
        if names == ("native",):
            # No line: the cheap probes' guess, or windows that saw too little survive.
            # A line a later verdict names (the alarm's capture) takes its place.
            self._guessed.add("native")
        rate = float(verdict.rate_per_hour or 0.0)
        # One spelling per culprit: a chain as the capture's names are kept (``a → b``).
        names = tuple(dict.fromkeys(mkeys.format_culprit(n) if _is_site(n) else n
                                    for n in names))
        in_bytes = verdict.unit == "bytes"
        for name in names:
            if name in self.culprits or len(self.culprits) < MAX_CULPRITS:
                if in_bytes and name not in self._by_bytes:
                    # A rate in bytes replaces a count's, in the bytes verdict's order.
                    self.culprits.pop(name, None)
                    self.culprits[name] = rate
                    self._by_bytes.add(name)
                elif in_bytes or name not in self._by_bytes:
                    self.culprits[name] = max(rate, self.culprits.get(name, 0.0))
        if not self.warned:
            self.warned = True
            warn(self.describe(verdict, names), LeakWarning)

    def _raise(self, verdict: Any) -> None:
        self.alarmed[verdict.key] = verdict
        self.latest[verdict.key] = verdict
        self._streak.pop(verdict.key, None)
        level = self._level(verdict.key)
        if level is not None and verdict.rate_per_hour is not None:
            self._pace[verdict.key] = (level[0], level[1], float(verdict.rate_per_hour) / 3600)

    def _level(self, key: str) -> tuple[float, float] | None:
        """The latest value of ``key`` in the history and its time."""
        history = self.prober.history if self.prober is not None else ()
        for i in range(len(history) - 1, max(-1, len(history) - 50), -1):
            sample = history[i]
            value = sample.values.get(key)
            if value is not None:
                return float(value), float(sample.time_seconds)
        return None

    def _ahead_of_pace(self, key: str) -> bool:
        """Whether ``key`` is still at or above where its growth at the alarm's rate
        would have taken it: a level reached by a jump (the alarm's capture, a buffer
        that came and went) stays flat while the process reuses what was freed, and a
        leak going on at that rate is only then seen again."""
        pace = self._pace.get(key)
        level = self._level(key)
        if pace is None or level is None:
            return False
        start, t0, per_second = pace
        return level[0] >= start + per_second * (level[1] - t0)

    def describe(self, verdict: Any, names: Sequence[str]) -> str:
        """One line naming the process, the metric, the rates and the culprit."""
        who = self.role if self.index is None else f"{self.role} {self.index}"
        metric = mkeys.short_key(verdict.key, self.prefix)
        unit = verdict.unit
        per_hour = verdict.rate_per_hour
        amount = functools.partial(memprobe.format_value, unit=unit, signed=True)
        rate = f"{amount(per_hour)}/hour, " if per_hour is not None else ""
        where = ", ".join(names) if names else "unknown (add the tracemalloc or objects probe)"
        return (f"memprobe_rllib: {who} leaks: {metric} {rate}"
                f"{amount(verdict.slope_per_step)} per sample ({self.step_name}) "
                f"over {verdict.n_points} samples; where: {where}")

    def refresh(self) -> None:
        """Read the alarm's latest report (``prober.alarm.latest``), when there is a new one."""
        alarm = getattr(self.prober, "alarm", None)
        report = getattr(alarm, "latest", None)
        if report is None or report is self._seen_report:
            return
        self._seen_report = report
        captured: list[str] = []
        in_a_row = max(1, int(getattr(alarm, "confirmations", 1)))
        for key, v in report.verdicts.items():
            self.latest[key] = v
            if key not in self.alarmed:
                # The Prober's alarm calls on_leak once per key: a key it raised that was
                # lowered here since is raised again at as many leaking checks in a row.
                if v.leak and key in getattr(alarm, "alarmed", ()):
                    self._streak[key] = self._streak.get(key, 0) + 1
                    if self._streak[key] >= in_a_row:
                        self._raise(v)
                else:
                    self._streak.pop(key, None)
                continue
            if not v.leak:
                # Lowered once judged healthy at twice as many checks in a row as raising
                # it took, counted once the metric has fallen behind the pace it alarmed
                # at: a leak's resident size stalls while the process reuses memory it
                # freed (after the alarm's capture walked the heap: 100 samples in a
                # native-leak EnvRunner), and a plateau falls behind for good.
                if self._ahead_of_pace(key):
                    self._streak.pop(key, None)
                    continue
                self._streak[key] = self._streak.get(key, 0) + 1
                if self._streak[key] >= 2 * in_a_row:
                    del self.alarmed[key]
                    del self._streak[key]
                    self._pace.pop(key, None)
                continue
            self._streak.pop(key, None)
            if v.kind == "native" and "native" in self.culprits:
                captured += self._native_named(v)
            if v.culprits and v.kind in ("python", "objects"):
                # Culprits the alarm's capture named (first in the verdict that opened it):
                # lines and types, which say nothing of an fd or a native leak.
                rate = float(v.rate_per_hour or 0.0)
                names = [mkeys.format_culprit(n) if _is_site(n) else n for n in v.culprits
                         if not (_is_site(n) and mkeys.is_library_site(n))]
                rest: dict[str, float] = {}
                if names and self._guessed:
                    # What the capture saw replaces the guess, and comes first.
                    rest = {n: r for n, r in self.culprits.items() if n not in self._guessed}
                    self._dropped.update(n for n in self.culprits if n in self._guessed)
                    self.culprits.clear()
                    self._guessed.clear()
                if self.culprits or any(_is_site(n) for n in names):
                    # A builtin or library type says little beside a named line or type.
                    names = [n for n in names if _is_site(n) or not is_library_type(n)]
                if v.kind == "objects":  # the retained type first, then the lines
                    names.sort(key=_is_site)
                rates = culprit_rates(names, rate, getattr(alarm, "culprits", None))
                for name in names:
                    if name not in self.culprits and len(self.culprits) < MAX_CULPRITS:
                        self.culprits[name] = rates[name]
                        if v.unit == "bytes":
                            self._by_bytes.add(name)
                        captured.append(name)
                for name, r in rest.items():
                    if name not in self.culprits and len(self.culprits) < MAX_CULPRITS:
                        self.culprits[name] = min(r, min(self.culprits.values(), default=r))
        if captured:
            who = self.role if self.index is None else f"{self.role} {self.index}"
            warn(f"memprobe_rllib: {who}: leak culprits found since the alarm: "
                 f"{', '.join(captured)}", LeakWarning)

    def saw(self, values: Mapping[str, Any]) -> None:
        """A sample's values: a memray window that closed in it gives the user's native
        stacks it saw surviving (:attr:`_native_stacks`)."""
        if mkeys.make_key(self.prefix, "memray", "window_seconds") not in values:
            return
        sizes: dict[str, float] = {}
        for key, value in values.items():
            found = mkeys.split_site_key(key, self.prefix)
            if found is not None and found[0] == "memray" and found[1].section == "top" \
                    and found[1].stat == "size_bytes":
                sizes[found[1].name] = float(value)
        stacks = _native_stacks(sorted(sizes, key=lambda n: -sizes[n]))
        self._native_stacks = tuple(stacks[:MAX_CULPRITS])
        if "native" in self.culprits and self._native_stacks:
            self._replace_native(list(self._native_stacks))

    def _native_named(self, v: Any) -> list[str]:
        """Replace the culprit ``native`` (said at the alarm, before a memray window
        closed) with the native stacks a native verdict now names, else those the
        latest memray window saw: the user's line down to the C function
        (``app.py:12 → leaky_alloc``); else the user's lines whose kept objects hold
        it, that the alarm's capture saw (a ``torch.Tensor``, a C buffer's address)."""
        held = [mkeys.format_culprit(n) for n in v.culprits
                if _is_site(n) and not mkeys.is_library_site(n)]
        return self._replace_native(_native_stacks(v.culprits) or list(self._native_stacks)
                                    or held)

    def _replace_native(self, names: list[str]) -> list[str]:
        """``names`` in place of the culprit ``native`` (at its rate); those added."""
        if not names:
            return []
        rate = self.culprits.pop("native")
        self._dropped.add("native")
        self._guessed.discard("native")
        added = []
        for name in names:
            if name not in self.culprits and len(self.culprits) < MAX_CULPRITS:
                self.culprits[name] = rate
                self._by_bytes.add(name)  # named in place of a bytes metric's "native"
                added.append(name)
        return added

    def ranked_culprits(self) -> list[tuple[str, float]]:
        """The culprits with the rates their keys carry, fastest first. The user's own
        culprits that a bytes metric's verdict named come first: a library's line or type
        (the windows' survivors of RLlib's episodes in flight, a ``dict``), or a name only
        a count's verdict gave (its rate is in blocks or objects per hour, not bytes), is
        context beside them, its rate held to the slowest of theirs. So the user's line
        comes first by rate, as the verdicts rank it."""
        def library(name: str) -> bool:
            return (mkeys.is_library_site(name) if _is_site(name)
                    else name not in ("native", "fds", "threads") and is_library_type(name))

        bytes_named = any(n in self._by_bytes for n in self.culprits)

        def context(name: str) -> bool:
            return library(name) or (bytes_named and name not in self._by_bytes)

        own = [r for n, r in self.culprits.items() if not context(n)]
        cap = _CONTEXT_SHARE * min(own) if own else None
        rates = [(n, min(r, cap) if cap is not None and context(n) else r)
                 for n, r in self.culprits.items()]
        order = {n: i for i, (n, _) in enumerate(rates)}
        ranked = sorted(rates, key=lambda c: (-c[1], context(c[0]), order[c[0]]))
        # Strictly slower down the list: RLlib keeps a key's place once logged, so a
        # reader ranking the keys by value would otherwise break a tie by when each
        # was first logged, not by the verdicts' order.
        out: list[tuple[str, float]] = []
        for name, rate in ranked:
            if out and rate >= out[-1][1]:
                rate = out[-1][1] * _TIE_SHARE
            out.append((name, rate))
        return out

    # -- as keys ------------------------------------------------------------------------
    def values(self, sample_keys: Any = ()) -> dict[str, float]:
        """The leak keys with the latest verdicts (the same keys at every call)."""
        self.refresh()
        if self.judged is None:
            present = set(sample_keys)
            self.judged = tuple(m for m in JUDGED if mkeys.key_of(self.prefix, m) in present)
        leak = functools.partial(mkeys.leak_key, self.prefix)
        out: dict[str, float] = {}
        worst = 0.0
        for metric in self.judged:
            key = mkeys.key_of(self.prefix, metric)
            v = self.latest.get(key)
            alarmed = key in self.alarmed
            # The rate of a growth: not the slope of a warm-up judged levelled off (a
            # healthy driver's read 535 MiB/h), nor of too few samples.
            growing = v is not None and (v.status in ("leak", "slight") or alarmed)
            rate = float(v.rate_per_hour or 0.0) if growing else 0.0
            out[leak(metric, "rate_per_hour")] = rate
            out[leak(metric, "suspect")] = 1.0 if alarmed else 0.0
            if alarmed and v is not None and v.unit == "bytes":
                worst = max(worst, rate)
        suspect = 1.0 if self.alarmed else 0.0
        out[leak("suspect")] = suspect
        out[leak("rate_per_hour")] = worst
        rss = self.latest.get(mkeys.make_key(self.prefix, "process", "rss_bytes"))
        hours = getattr(rss, "hours_to_oom", None)
        out[leak("hours_to_oom")] = -1.0 if hours is None else float(hours)
        if self.role == "env_runner" and self.index is not None:
            out[leak(f"env_runner_{self.index}")] = suspect
        for name, rate in self.ranked_culprits():
            out[mkeys.culprit_key(self.prefix, name)] = rate
        for name in self._dropped:
            out[mkeys.culprit_key(self.prefix, name)] = 0.0
        return out
