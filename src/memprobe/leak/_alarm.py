"""The leak alarm: judge a history every N samples at every time scale, alarm once per
metric after K checks that each saw new evidence, and forecast the time to out-of-memory."""

from __future__ import annotations

import dataclasses
import gc
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Union

from .._checks import check_int, hint
from .._errors import ConfigError, LeakWarning, show
from .._sample import Number
from ..keys import make_key, short_key, split_short
from ._alarm_capture import AlarmCapture, captured_kind, captured_names, check_capture_option
from ._kinds import BLOCKS, DEFAULT_METRICS, OBJECT_COUNTS
from ._oom import hours_to_oom, oom_headroom
from ._series import judged_keys
from ._tiers import Tiers

if TYPE_CHECKING:  # imported at the first check: the statistics are not needed before
    from collections.abc import Sequence

    from .._sample import Sample
    from ..capture import Culprits
    from ._verdicts import Report, Verdict

#: What to do on a leak: ``"warn"`` (a :class:`memprobe.LeakWarning`), or a callable
#: given each newly leaking :class:`memprobe.Verdict`.
OnLeak = Union[Callable[["Verdict"], Any], Literal["warn"]]

#: A metric alarms once it has been judged leaking, check after check, for
#: :data:`PERSISTENCE` times the scale its first leaking verdict rested on, at most
#: :data:`PERSISTENCE_SAMPLES` samples: a growth seen over N samples must go on over
#: 1.5 N more. A warm-up or a cache that fills is as steep as a leak while it grows;
#: what tells them apart is that they stop (measured: a 200-sample ramp is judged
#: leaking from sample 100 to 220, levelled off at 260; a cache that fills over 400
#: samples, leaking at 340 and 380, levelled off once it clears; docs/leaks.md,
#: "Detection curve and false alarms"). At most 128 samples, so that a slow leak,
#: first seen over hundreds of samples, is not held back by as many more (RLlib at
#: 5 KiB per episode: first seen over ~650 episodes, when an iteration of 2,000 steps
#: holds 4-10 episodes; the healthy long RLlib runs still raise no alarm: docs/leaks.md).
PERSISTENCE = 1.5
PERSISTENCE_SAMPLES = 128

#: Share of a count of live objects' growth that one full collection must free for the
#: growth to be garbage awaiting collection, not a leak. Cyclic garbage waits for the
#: oldest generation's collection, which a large heap runs rarely (CPython collects it
#: once the objects moved there since reach a quarter of those it holds): a healthy
#: RLlib EnvRunner's blocks grew by 0.5% over 1,800 samples with no full collection.
GARBAGE_SHARE = 0.5


def check_memory_bytes() -> int:
    """The memory a leak check's own retention is measured by: malloc's bytes in use
    (glibc's ``mallinfo2``: chunks in use and mmapped) where it can be read, else the
    resident size (0 when neither can be read).

    Not the resident size where malloc's can be read: a check's temporaries on top
    of the heap move the program break up, and the leaking allocations after the
    check then take the pages it touched. Counted as the check's, those steps of a
    leak would be subtracted from it (measured: 28 of 30 MiB of a 5 KiB-per-sample
    leak; docs/leaks.md).
    """
    from ..probes.malloc import in_use_bytes

    in_use = in_use_bytes()
    if in_use is not None:
        return in_use
    from ..probes.process import resident_bytes

    return resident_bytes()


def check_oom_capture_hours(value: Any) -> float | None:
    """``oom_capture_hours=``: None or a number of hours >= 0."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not value >= 0):
        raise ConfigError("oom_capture_hours", f"must be None or a number >= 0, got {show(value)}")
    return value


def check_leak_options(options: Any) -> dict[str, Any]:
    """``leak_options=``: options of :func:`memprobe.analyze_samples` (:data:`LEAK_OPTIONS`)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigError("leak_options", f"must be a mapping, got {show(options)}")
    from ._verdicts import LEAK_OPTIONS

    known = sorted(LEAK_OPTIONS)
    for k in options:
        if k not in LEAK_OPTIONS:
            raise ConfigError(f"leak_options.{k}", f"unknown option{hint(str(k), known)} "
                              f"(options: {', '.join(known)})")
    return dict(options)


def feed_tiers(tiers: Tiers, history: Sequence[Sample], prefix: str, new: int,
               metrics: Sequence[str] | None) -> None:
    """Feed ``tiers`` the newest ``new`` samples of ``history`` (a Prober's, newest last):
    the whole-process metrics judged (``metrics``, default
    :data:`memprobe.DEFAULT_METRICS`), less memprobe's own memory. Samples the history
    no longer holds are counted, not fed (their indexes are not reused)."""
    n = len(history)
    take = min(new, n)
    keep = judged_keys(prefix, metrics, sites=False)
    select = getattr(history, "select", None)
    samples = select(keep, n - take) if select is not None else history[n - take:]
    if take < new:  # a history shorter than the samples since the last feed
        tiers.skip(new - take)
    # Kept at every scale: the metrics judged and the resident size (the floor's level).
    # Not the windows' per-site keys, which are read from the history: a site that
    # survives any window would otherwise add a series for good.
    judged = {*(metrics if metrics is not None else DEFAULT_METRICS), "process/rss_bytes"}
    tiers.feed(samples, prefix, keep, lambda key: short_key(key, prefix) in judged)


class LeakAlarm:
    """Judges a sample history every ``check_every`` samples and alarms on lasting leaks.

    A metric alarms when it is judged leaking at ``confirmations`` checks in a
    row (a transient, such as an allocator step after a plateau, rarely lasts
    two checks: docs/leaks.md has the false-alarm rates), and only once. A count
    of live objects needs one check more. The checks in a row must also span
    :data:`PERSISTENCE` times the scale the first of them rested on (at most
    :data:`PERSISTENCE_SAMPLES`): a growth that stops within that (a warm-up, a
    cache that fills, then clears) does not alarm. Checks are at least ``evidence_samples``
    samples apart (:meth:`tick` waits for the first multiple of ``check_every``
    after that): two checks a few samples apart judge nearly the same data, so
    how often the alarm checks does not change how often it cries wolf, nor what
    the checks cost.

    The alarm keeps the judged whole-process metrics at every time scale
    (:attr:`tiers`, fed with the samples new at each check, in bounded memory),
    so a leak too slow to show within the history's window shows over hours.
    After each check, a leaking ``process/rss_bytes`` gets its forecast
    ``hours_to_oom`` (:func:`memprobe.oom_headroom`); under ``oom_capture_hours``,
    the capture opens even before the alarm is confirmed, so the culprit is on
    record before the process is killed.

    The owner (a :class:`memprobe.Prober`, the RLlib adapter) calls :meth:`tick`
    after each sample and, when it returns True, :meth:`check` with a fresh
    :class:`memprobe.Report` made with :attr:`options`.

    :param on_leak: ``"warn"`` or a callable given each newly leaking Verdict.
    :param check_every: judge every this many samples.
    :param confirmations: checks in a row a metric must leak at before it alarms.
    :param options: options of :func:`memprobe.analyze_samples` for each check.
    :param evidence_samples: new samples a check needs since the last check that
        counted toward the confirmations.
    :param oom_capture_hours: open the capture once the forecast time to out-of-memory
        of a growing resident size falls under this many hours (None: never).
    :param capture: the deep capture opened in this process when a metric first
        alarms with no culprit named (or, when the culprit is a type, the referrer
        chains of its instances): ``True`` (10 s, tracemalloc and objects),
        ``False``, or options of :class:`memprobe.capture.CulpritCapture`
        (``duration_seconds``, ``native``...). Its owner calls
        :meth:`capture_due` after each sample and then :meth:`finish_capture`.

    :ivar latest: the Report of the latest check (None before the first); once a
        capture has closed, the verdicts that opened it name its culprits and holders.
    :ivar alarmed: the keys that have alarmed.
    :ivar tiers: the judged metrics at every time scale (:class:`memprobe.Tiers`).
    """

    def __init__(
        self,
        on_leak: OnLeak,
        *,
        check_every: int = 50,
        confirmations: int = 2,
        options: Mapping[str, Any] | None = None,
        capture: bool | Mapping[str, Any] = False,
        evidence_samples: int = 40,
        oom_capture_hours: float | None = 1.0,
    ) -> None:
        if on_leak != "warn" and not callable(on_leak):
            raise ConfigError("on_leak", f"must be a callable or 'warn', got {show(on_leak)}")
        self.on_leak = on_leak
        self.check_every = check_int("leak_check_every", check_every, 1)
        self.confirmations = check_int("leak_confirmations", confirmations, 1)
        self.options = check_leak_options(options)
        self.evidence_samples = check_int("leak_evidence_samples", evidence_samples, 1)
        self.oom_capture_hours = check_oom_capture_hours(oom_capture_hours)
        self.tiers = Tiers()
        self._fed = 0  # samples fed into the tiers
        self._counted = -evidence_samples  # the sample count at the last counted check
        self.latest: Report | None = None
        self.alarmed: set[str] = set()
        # key -> (leaking checks in a row, the sample count at the first leaking check
        # since two healthy ones in a row, the samples its scale spanned, 1 after one
        # healthy check)
        self._streak: dict[str, tuple[int, int, int, int]] = {}
        self._samples = 0
        capture_options = check_capture_option(capture)
        self._capture = None if capture_options is None else AlarmCapture(capture_options)
        # The verdict code is imported now, not at the first check: its modules'
        # memory would otherwise appear in the middle of the series it judges.
        from . import _verdicts  # noqa: F401

    @property
    def culprits(self) -> Culprits | None:
        """What the deep capture found (None before it closes, or without one)."""
        return None if self._capture is None else self._capture.culprits

    @property
    def capturing(self) -> bool:
        """Whether a deep capture is open."""
        return self._capture is not None and self._capture.active

    def capture_due(self) -> bool:
        """Whether the open capture should be closed now (cheap: False when none is open)."""
        capture = self._capture
        return capture is not None and capture.due()

    def finish_capture(self, prefix: str) -> dict[str, Number]:
        """Close the capture: the culprits go into :attr:`latest` and :attr:`culprits`,
        and ``"warn"`` warns with them. Returns the flat values (keys under
        ``<prefix>/capture/``) of the line to write to the sinks."""
        capture = self._capture
        assert capture is not None
        values = capture.finish(prefix)
        if self.latest is not None:
            self.latest = self._with_culprits(self.latest)
        culprits = capture.culprits
        if culprits is not None and not callable(self.on_leak):
            warnings.warn("memprobe: leak culprits (captured after the alarm on "
                          f"{', '.join(capture.keys)}):\n{culprits.describe()}",
                          LeakWarning, stacklevel=4)
        return values

    def abandon_capture(self) -> None:
        """Close an open capture without a result (its owner stops)."""
        if self._capture is not None:
            self._capture.abandon()

    def _with_culprits(self, report: Report) -> Report:
        """``report`` with the captured culprits first, and their holders, in the verdicts
        that opened the capture."""
        capture = self._capture
        if capture is None or capture.culprits is None:
            return report
        names = captured_names(capture.culprits)
        holders = tuple(str(c) for c in capture.culprits.holders)
        if not names and not holders:
            return report
        verdicts = dict(report.verdicts)
        for key in capture.keys:
            v = verdicts.get(key)
            if v is not None and names:
                note = f"culprits captured over {capture.culprits.duration_seconds:.1f} s"
                kind = captured_kind(capture.culprits, v, capture.samples)  # what it kept
                v = dataclasses.replace(
                    v, culprits=names + tuple(c for c in v.culprits if c not in names),
                    kind=kind[0] if kind else v.kind,
                    note=(f"{kind[1]}; {note}" if kind else
                          f"{v.note}; {note}" if v.note else note))
            if v is not None:
                verdicts[key] = dataclasses.replace(v, holders=holders or v.holders)
        return dataclasses.replace(report, verdicts=verdicts)

    def _needed(self, verdict: Verdict) -> int:
        """Checks in a row before ``verdict``'s metric alarms: one more for a count of live
        objects (``objects/*``, ``gc/allocated_blocks``), which a cache that fills grows
        at a leak's rate until it is full (measured: docs/rllib.md, field accuracy)."""
        return self.confirmations + 1 if _counts_objects(verdict.metric) else self.confirmations

    def _garbage(self, verdict: Verdict) -> bool:
        """Whether a count of live objects about to alarm grew by garbage awaiting
        collection: one full collection (``gc.collect()``, only then, and only where the
        program leaves the collector on) frees :data:`GARBAGE_SHARE` of what the verdict
        judged grown or more. The counts then start afresh (their tiers and checks in a
        row), from after the collection: a leak grows on and alarms; garbage does not."""
        if not gc.isenabled():
            return False  # garbage never collected is memory the program keeps
        blocks = sys.getallocatedblocks()
        found = gc.collect()
        freed = blocks - sys.getallocatedblocks() if verdict.metric == BLOCKS else found
        if freed < GARBAGE_SHARE * verdict.slope_per_step * max(1, verdict.span_points):
            return False
        counts = [k for k in (*self.tiers.series, *self._streak)
                  if _counts_objects(short_key(k, verdict.prefix))]
        for key in counts:
            self.tiers.series.pop(key, None)
            self._streak.pop(key, None)
        return True

    def absorb(self, history: Sequence[Sample], prefix: str) -> Tiers:
        """Feed :attr:`tiers` the samples of ``history`` (a Prober's, newest last) counted
        by :meth:`tick` since the last call; returns the tiers."""
        new = self._samples - self._fed
        if new > 0:
            feed_tiers(self.tiers, history, prefix, new, self.options.get("metrics"))
            self._fed = self._samples
        return self.tiers

    def tick(self) -> bool:
        """Count one sample; True when a check is due: at a multiple of ``check_every``
        samples, once ``evidence_samples`` samples came since the last check (a check
        sooner would judge nearly the same data and could not count)."""
        self._samples += 1
        n = self._samples
        return n % self.check_every == 0 and n - self._counted >= self.evidence_samples

    def check(self, report: Report) -> list[Verdict]:
        """Take the verdicts of a check; alarm for each metric newly confirmed leaking.

        :returns: the verdicts that alarmed at this check.
        """
        report = self.forecast(report)
        self.latest = self._with_culprits(report)
        if self._capture is not None:
            self._capture.maybe_start(self._near_oom(report))
        if self._samples - self._counted < self.evidence_samples:
            return []  # too little new evidence since the last check that counted
        self._counted = self._samples
        leaking = report.leaking
        streak, now = self._streak, self._samples
        self._streak = {}
        for key, (_, since, span, misses) in streak.items():
            if not misses and key in report.verdicts:  # one healthy check: kept, not counted
                self._streak[key] = (0, since, span, 1)
        for v in leaking:
            checks, since, span, _ = streak.get(v.key, (0, now, v.span_points, 0))
            self._streak[v.key] = (checks + 1, since, span, 0)
        fired = []
        garbage: bool | None = None  # found by a full collection at this check
        for v in leaking:
            checks, since, span, _ = self._streak[v.key]
            if (v.key in self.alarmed or checks < self._needed(v)
                    or now - since < min(PERSISTENCE * span, PERSISTENCE_SAMPLES)):
                continue
            if _counts_objects(v.metric):
                if garbage is None:
                    garbage = self._garbage(v)
                if garbage:
                    continue
            self.alarmed.add(v.key)
            fired.append(v)
            if callable(self.on_leak):
                self.on_leak(v)
            else:
                warnings.warn(f"memprobe: leak: {v.describe()}", LeakWarning, stacklevel=5)
        if self._capture is not None:
            self._capture.maybe_start(fired)
        return fired

    def forecast(self, report: Report) -> Report:
        """``report`` with ``hours_to_oom`` on a resident size judged leaking, forecast
        against this process's :func:`memprobe.oom_headroom`.

        Not on one growing "slightly" (under the floor): that is how a healthy process's
        warm-up reads over its first checks, at rates a leak would have (up to 1.6 GiB/h
        over the first 100 samples of a healthy RLlib EnvRunner, which would page the
        6 h alert rule of docs/cluster.md on a node with less than 9.4 GiB free:
        ``benchmarks/healthy_oom_margin.py``, docs/cluster.md)."""
        key = next((k for k, v in report.verdicts.items()
                    if v.metric == "process/rss_bytes" and v.status == "leak"
                    and (v.rate_per_hour or 0) > 0), None)
        if key is None:
            return report
        headroom = oom_headroom()
        if headroom is None:
            return report
        v = report.verdicts[key]
        v = dataclasses.replace(v, hours_to_oom=hours_to_oom(headroom.bytes, v.rate_per_hour))
        return dataclasses.replace(report, verdicts={**report.verdicts, key: v})

    def check_values(self, prefix: str) -> dict[str, Number]:
        """What the sample after a check records of it, so that a reader of the file
        (``memprobe report``) has the forecast this process made against its own limit:
        ``<prefix>/leak/hours_to_oom`` (-1 when its resident size is not judged leaking)."""
        hours = -1.0
        for v in self.latest.verdicts.values() if self.latest is not None else ():
            if v.metric == "process/rss_bytes" and v.hours_to_oom is not None:
                hours = float(v.hours_to_oom)
        return {make_key(prefix, "leak", "hours_to_oom"): hours}

    def _near_oom(self, report: Report) -> list[Verdict]:
        """The verdicts whose forecast time to out-of-memory is under the threshold."""
        limit = self.oom_capture_hours
        if limit is None:
            return []
        return [v for v in report.verdicts.values()
                if v.hours_to_oom is not None and v.hours_to_oom < limit]

    def reset(self) -> None:
        """Forget every check (a forked child judges its own samples only)."""
        self.latest = None
        self.tiers = Tiers()
        self._fed = 0
        self._counted = -self.evidence_samples
        self.alarmed.clear()
        self._streak.clear()
        self._samples = 0
        if self._capture is not None:
            self._capture.reset()


def _counts_objects(metric: str) -> bool:
    """Whether ``metric`` (without prefix) is a count of live objects (``objects/*``,
    ``gc/allocated_blocks``)."""
    return metric in OBJECT_COUNTS or split_short(metric)[0] == "objects"
