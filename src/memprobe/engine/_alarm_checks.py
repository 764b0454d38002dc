"""The leak alarm's work inside a Prober: judging its history every N samples (and
counting what that judging keeps of the resident size), closing a capture into one
more line for the sinks, and the verdicts of ``Prober.report()`` (at every time scale:
the alarm's tiers, or without an alarm a :class:`TierFeed`'s)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._checks import check_int
from .._jsonl_fields import HOLDERS
from .._sample import Number, Sample
from .._sitestats import collector_paused
from ..keys import make_key
from ..leak._alarm import LeakAlarm, OnLeak, check_leak_options, check_oom_capture_hours
from ..leak._alarm_capture import check_capture_option
from ..leak._garbage import FullCollections
from ._history import History
from ._tier_feed import TierFeed

if TYPE_CHECKING:
    from ..leak._verdicts import Report

#: How a failure is reported: ``(name, where, exception)``, counted under
#: ``<prefix>/errors/<name>`` and warned about once (memprobe.engine._hooks.SampleHooks.failed).
Failed = Callable[[str, str, BaseException], None]


def make_alarm(on_leak: OnLeak | None, check_every: int, confirmations: int,
               options: Any, capture: Any, oom_capture_hours: Any = 1.0) -> LeakAlarm | None:
    """The Prober's leak alarm for its ``on_leak``, ``leak_*``, ``capture_on_leak`` and
    ``oom_capture_hours`` options (None without ``on_leak``, the other options checked
    all the same)."""
    if on_leak is not None:
        return LeakAlarm(on_leak, check_every=check_every, confirmations=confirmations,
                         options=options, capture=capture, oom_capture_hours=oom_capture_hours)
    check_oom_capture_hours(oom_capture_hours)
    check_int("leak_check_every", check_every, 1)
    check_int("leak_confirmations", confirmations, 1)
    check_leak_options(options)
    if capture is not True:
        check_capture_option(capture)
    return None


#: The latest samples of the history a leak check reads (the tiers hold every scale of
#: the judged metrics): the check's working memory then stops growing once that many
#: samples are in, whatever the history's length. Read whole, a history of 1,000
#: samples grew the resident size of a Prober around an empty loop by 2.5 MiB over its
#: first 1,000 samples (each check's working set the larger by 1.5 KiB per sample),
#: which its alarm judged a leak.
CHECK_SAMPLES = 200


def judge_history(history: History, lock: contextlib.AbstractContextManager[Any], prefix: str,
                  judging: AlarmChecks | TierFeed, /, latest: int | None = None,
                  **options: Any) -> Report:
    """Leak verdicts on ``history``, judged with ``prefix`` (``Prober.report()``), read
    under ``lock``; at every time scale of the alarm's tiers or, without an alarm, of
    the :class:`TierFeed`'s (the whole run); with the alarm, with its forecast of the
    time to out-of-memory.

    Options go to :func:`memprobe.analyze_samples` (``thresholds``,
    ``warmup``, ``min_points``...). ``latest``: read only the latest that many samples
    of the history (all of them by default).
    """
    from ..leak._verdicts import analyze_samples, judged_keys

    options.setdefault("prefix", prefix)
    if options["prefix"] == prefix:  # every full collection of the run, not the history's
        options.setdefault("collections", tuple(judging.full.events))
    keep = judged_keys(options["prefix"], options.get("metrics"), options.get("sites", True))
    with lock:  # the history is read as it is judged, one sample at a time
        start = max(0, len(history) - latest) if latest is not None else 0
        if options["prefix"] != prefix:
            return analyze_samples(history.select(keep, start), **options)
        alarm = judging.alarm
        if alarm is None:
            options.setdefault("tiers", judging.absorb())
            return analyze_samples(history.select(keep, start), **options)
        options.setdefault("tiers", alarm.absorb(history, prefix))
        return alarm.forecast(analyze_samples(history.select(keep, start), **options))


class AlarmChecks:
    """A Prober's leak alarm, run after each sample: its checks, its capture's line,
    and the resident bytes its checks kept (``overhead/check_retained_bytes``).

    Its methods run inside the Prober's ``sample()``, under the Prober's lock.

    :ivar alarm: the :class:`LeakAlarm`.
    :ivar check_retained: resident bytes the leak checks kept, in total.
    :ivar check_retained_due: a check kept some since the last sample reported it.
    """

    def __init__(self, alarm: LeakAlarm, prefix: str, history: History,
                 failed: Failed) -> None:
        self.alarm = alarm
        self.prefix = prefix
        self._history = history
        self._failed = failed
        self.check_retained = 0
        self.check_retained_due = False
        self.check_values: dict[str, Number] = {}  # what the next sample carries of a check
        self._key_check_retained = make_key(prefix, "overhead", "check_retained_bytes")
        # Over the whole run: the history drops the samples that recorded them.
        self.full = FullCollections(prefix)
        self._seen = 0  # samples taken: the x of a sample without a step

    def after_sample(self, values: dict[str, Number], now: float, step: int | None,
                     pid: int) -> Sample | None:
        """Check when a check is due; close the capture when it is due. Returns the
        capture's line for the sinks, or None."""
        self.full.add(float(step if step is not None else self._seen), values)
        self._seen += 1
        alarm = self.alarm
        if alarm.tick():
            self._check_leaks(alarm)
        if alarm.capture_due():
            return self._finish_capture(alarm, now, step, pid)
        return None

    def add_retained(self, values: dict[str, Number]) -> None:
        """After a check kept memory: ``overhead/check_retained_bytes`` into ``values``,
        the next sample's."""
        if self.check_retained_due:
            self.check_retained_due = False
            values[self._key_check_retained] = self.check_retained
            values.update(self.check_values)  # the check's forecast, for readers of the file

    def reset(self) -> None:
        """Forget every check (a forked child judges its own samples only)."""
        self.alarm.reset()  # a capture the parent had open is abandoned
        self.check_retained = 0
        self.check_retained_due = False
        self.check_values = {}
        self.full = FullCollections(self.prefix)
        self._seen = 0

    def report(self, **options: Any) -> Report:
        return judge_history(self._history, contextlib.nullcontext(), self.prefix, self,
                             CHECK_SAMPLES, **options)

    def _check_leaks(self, alarm: LeakAlarm) -> None:
        """The leak alarm's check: never raises into the caller's loop.

        Sites and types are judged only when a metric leaks. The memory in use
        (:func:`memprobe.leak._alarm.check_memory_bytes`) is read before and after the
        judging: what it keeps is memprobe's. The total goes into the next sample
        as ``overhead/check_retained_bytes``, which verdicts subtract from the
        resident size like memprobe's other own memory, with the check's forecast
        (``leak/hours_to_oom``).

        What the alarm does once a metric alarms (its ``on_leak``, the capture it
        opens) is not in that span: a capture's walk of the heap is a one-off high
        point that the process's next allocations reuse. Counted as kept for good,
        it would hide that much of the leak that opened it.
        """
        from ..leak._alarm import check_memory_bytes as resident_bytes

        before = resident_bytes()
        judged = False
        try:
            # Counts of live objects unconfirmed: the alarm confirms them itself, by a
            # collection before it alarms (LeakAlarm._garbage).
            options = {**alarm.options, "confirm_counts": False}
            with collector_paused():
                report = self.report(**{**options, "sites": False})
                if report.leaking and options.get("sites", True):
                    # Per-site and per-type verdicts, to name the culprits, only when a
                    # metric leaks: a healthy job's checks read a few series, not dozens.
                    report = self.report(**options)
                self._count_check_retained(before, resident_bytes())
            judged = True
            alarm.check(report)
            self.check_values = alarm.check_values(self.prefix)
        except Warning:
            raise  # warnings turned into errors by the user's filters are theirs
        except Exception as exc:
            self._failed("leak_alarm", "on_leak", exc)
        finally:
            if not judged:
                self._count_check_retained(before, resident_bytes())

    def _count_check_retained(self, before: int, after: int) -> None:
        """Add what one check's judging kept of the resident size (0 when unknown)."""
        if before and after:
            self.check_retained = max(0, self.check_retained + after - before)
            self.check_retained_due = True

    def _finish_capture(self, alarm: LeakAlarm, now: float, step: int | None,
                        pid: int) -> Sample | None:
        """Close the alarm's capture: its culprits as one more line for the sinks, its
        referrer chains as the line's ``holders`` field; never raises into the
        caller's loop."""
        try:
            values = alarm.finish_capture(self.prefix)
        except Warning:
            raise  # warnings turned into errors by the user's filters are theirs
        except Exception as exc:
            alarm.abandon_capture()
            self._failed("leak_capture", "finish", exc)
            return None
        culprits = alarm.culprits
        labels = None
        if culprits is not None and culprits.holders:
            labels = {HOLDERS: "\n".join(map(str, culprits.holders))}
        return Sample(now, step, pid, values, labels)
