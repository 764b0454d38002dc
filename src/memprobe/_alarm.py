"""The leak alarm: judge a history every N samples, alarm once per metric after K checks."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Union

from ._alarm_capture import AlarmCapture, captured_kind, captured_names, check_capture_option
from ._errors import ConfigError, LeakWarning, show
from ._kinds import OBJECT_COUNTS
from ._options import check_int, hint
from ._sample import Number

if TYPE_CHECKING:  # imported at the first check: the statistics are not needed before
    from ._verdicts import Report, Verdict
    from .capture import Culprits

#: What to do on a leak: ``"warn"`` (a :class:`memprobe.LeakWarning`), or a callable
#: given each newly leaking :class:`memprobe.Verdict`.
OnLeak = Union[Callable[["Verdict"], Any], Literal["warn"]]


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


class LeakAlarm:
    """Judges a sample history every ``check_every`` samples and alarms on lasting leaks.

    A metric alarms when it is judged leaking at ``confirmations`` checks in a
    row (a transient, such as an allocator step after a plateau, rarely lasts
    two checks: docs/leaks.md has the false-alarm rates), and only once. A count
    of live objects needs one check more.

    The owner (a :class:`memprobe.Prober`, the RLlib adapter) calls :meth:`tick`
    after each sample and, when it returns True, :meth:`check` with a fresh
    :class:`memprobe.Report` made with :attr:`options`.

    :param on_leak: ``"warn"`` or a callable given each newly leaking Verdict.
    :param check_every: judge every this many samples.
    :param confirmations: checks in a row a metric must leak at before it alarms.
    :param options: options of :func:`memprobe.analyze_samples` for each check.
    :param capture: the deep capture opened in this process when a metric first
        alarms with no culprit named (or, when the culprit is a type, the referrer
        chains of its instances): ``True`` (10 s, tracemalloc and objects),
        ``False``, or options of :class:`memprobe.capture.CulpritCapture`
        (``duration_seconds``, ``native``...). Its owner calls
        :meth:`capture_due` after each sample and then :meth:`finish_capture`.

    :ivar latest: the Report of the latest check (None before the first); once a
        capture has closed, the verdicts that opened it name its culprits and holders.
    :ivar alarmed: the keys that have alarmed.
    """

    def __init__(
        self,
        on_leak: OnLeak,
        *,
        check_every: int = 50,
        confirmations: int = 2,
        options: Mapping[str, Any] | None = None,
        capture: bool | Mapping[str, Any] = False,
    ) -> None:
        if on_leak != "warn" and not callable(on_leak):
            raise ConfigError("on_leak", f"must be a callable or 'warn', got {show(on_leak)}")
        self.on_leak = on_leak
        self.check_every = check_int("leak_check_every", check_every, 1)
        self.confirmations = check_int("leak_confirmations", confirmations, 1)
        self.options = check_leak_options(options)
        self.latest: Report | None = None
        self.alarmed: set[str] = set()
        self._streak: dict[str, int] = {}
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
        counts_objects = verdict.metric in OBJECT_COUNTS or verdict.metric.startswith("objects/")
        return self.confirmations + 1 if counts_objects else self.confirmations

    def tick(self) -> bool:
        """Count one sample; True when a check is due."""
        self._samples += 1
        return self._samples % self.check_every == 0

    def check(self, report: Report) -> list[Verdict]:
        """Take the verdicts of a check; alarm for each metric newly confirmed leaking.

        :returns: the verdicts that alarmed at this check.
        """
        self.latest = self._with_culprits(report)
        leaking = report.leaking
        streak = self._streak
        self._streak = {v.key: streak.get(v.key, 0) + 1 for v in leaking}
        fired = []
        for v in leaking:
            if v.key in self.alarmed or self._streak[v.key] < self._needed(v):
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

    def reset(self) -> None:
        """Forget every check (a forked child judges its own samples only)."""
        self.latest = None
        self.alarmed.clear()
        self._streak.clear()
        self._samples = 0
        if self._capture is not None:
            self._capture.reset()
