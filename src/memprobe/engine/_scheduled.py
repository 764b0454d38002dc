"""A probe inside a Prober: its schedule, its guards, its cost and its failures."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import MetricValueError, ProbeError, ProbeFailedWarning
from .._flatten import SiteKeyCap, check_row, flatten
from .._sample import Number
from ..keys import make_key
from ._isolation import IsolationWorker
from ._options import DEFAULT_MAX_KEYS


class ScheduledProbe:
    """One probe of a Prober with what the Prober tracks about it.

    ``every`` and ``interval_seconds`` say how often it may run; ``time_limit``,
    ``max_keys`` and ``worker`` (set when ``isolate=True``) guard the caller
    against it; ``cost_seconds`` is a moving average of its cost, for the
    budget; ``errors_count``, ``timeouts_count`` and ``consecutive_failures``
    count its failures, and ``disabled`` is set once it has failed too often.
    """

    __slots__ = (
        "consecutive_failures",
        "cost_seconds",
        "disabled",
        "errors_count",
        "every",
        "interval_seconds",
        "keys",
        "last_call",
        "last_time",
        "max_keys",
        "name",
        "overhead_key",
        "probe",
        "started",
        "time_limit",
        "timeouts_count",
        "warned",
        "windowed",
        "worker",
    )

    def __init__(self, name: str, probe: Any, every: int, interval_seconds: float) -> None:
        self.name = name
        self.probe = probe
        self.every = every
        self.interval_seconds = interval_seconds
        self.time_limit: float | None = None
        self.max_keys = DEFAULT_MAX_KEYS
        self.worker: IsolationWorker | None = None
        self.last_call = -(10**18)
        self.last_time = float("-inf")
        self.cost_seconds = 0.0
        self.overhead_key = ""  # <prefix>/overhead/<name>_seconds, set by the Prober
        #: The keys of the probe's ``columns``, made at its first row (see sample_values).
        self.keys: tuple[str, ...] | None = None
        self.errors_count = 0
        self.timeouts_count = 0
        self.consecutive_failures = 0
        self.disabled = False
        self.started = False
        self.warned = False
        #: The probe says when it holds a tracking window open (``window_open``).
        self.windowed = isinstance(getattr(type(probe), "window_open", None), property)

    def due(self, calls: int, now: float, budget_share: float | None) -> bool:
        """Whether the probe runs in the Prober's sample number ``calls``, at ``now``:
        ``every`` calls have passed since it last ran, and :meth:`due_by_time`, or the
        probe holds a tracking window open (a memray window: every ``malloc`` of the
        program pays for it, and the resident sizes read while it is open are not
        judged), which its next runs close, whatever the budget."""
        if calls - self.last_call < self.every:
            return False
        if self.windowed and self.probe.window_open:
            return True  # tracking costs every allocation of the program more than a call
        if budget_share is None and not self.interval_seconds:
            return True
        return self.due_by_time(now, budget_share)

    def ran(self, calls: int, now: float, cost: float, budgeted: bool, ok: bool) -> None:
        """Record a run in sample ``calls`` that ended at ``now`` and took ``cost``
        seconds: for the schedule, for the budget (a moving average of the cost, when
        ``budgeted``), and (``ok``: it gave values) the end of a run of failures."""
        if budgeted:
            avg = self.cost_seconds
            self.cost_seconds = 0.8 * avg + 0.2 * cost if avg else cost
        self.last_call = calls
        self.last_time = now
        if ok:
            self.consecutive_failures = 0

    def over_time_limit(self, cost: float) -> ProbeError | None:
        """A run that took ``cost`` seconds: the error to count when that is over the
        probe's time limit (its values are then dropped), else None."""
        if self.time_limit is None or cost <= self.time_limit:
            return None
        self.timeouts_count += 1
        return ProbeError(self.name, f"sample() took {cost:.3g} s, over its time limit of "
                          f"{self.time_limit:g} s; its values are dropped")

    def add_failure_counts(self, values: dict[str, Number], prefix: str) -> None:
        """``<prefix>/errors/<probe>`` and ``<prefix>/timeouts/<probe>`` once non-zero."""
        if self.errors_count:
            values[make_key(prefix, "errors", self.name)] = self.errors_count
            if self.timeouts_count:
                values[make_key(prefix, "timeouts", self.name)] = self.timeouts_count

    def due_by_time(self, now: float, budget_share: float | None) -> bool:
        """The time part of the schedule: the interval, and the probe's share of the budget
        (it may run at most once per ``cost_seconds / budget_share`` seconds)."""
        since = now - self.last_time
        if since < self.interval_seconds:
            return False
        if budget_share is not None and self.cost_seconds:
            if since < self.cost_seconds / budget_share:
                return False
        return True

    def sample_values(self, prefix: str,
                      site_key_cap: SiteKeyCap) -> tuple[Sequence[str], Sequence[Number]]:
        """The probe's values and their keys: ``sample()``, then its row checked and
        paired with the keys of its ``columns``, or its mapping checked and flattened."""
        res = self.probe.sample() if self.started and self.worker is None else self.sample()
        if type(res) is tuple:
            keys = self.keys
            if keys is None:
                keys = self.keys = self._column_keys(prefix)
            if len(res) != len(keys):
                raise MetricValueError(
                    self.name, f"sample() returned a row of {len(res)} values for "
                    f"{len(keys)} columns")
            return keys, check_row(keys, res)
        if not isinstance(res, Mapping):
            raise MetricValueError(
                self.name, f"sample() returned {type(res).__name__}, not a mapping or a tuple"
            )
        if len(res) > self.max_keys:
            raise MetricValueError(
                self.name, f"sample() returned {len(res)} keys, over max_keys="
                f"{self.max_keys}; the sample is dropped",
            )
        flat = flatten({self.name: res}, prefix=prefix,
                       site_key_cap=site_key_cap, max_keys=self.max_keys)
        if len(flat) > self.max_keys:
            raise MetricValueError(
                self.name, f"sample() flattened to {len(flat)} keys, over max_keys="
                f"{self.max_keys}; the sample is dropped",
            )
        return tuple(flat), tuple(flat.values())

    def _column_keys(self, prefix: str) -> tuple[str, ...]:
        """The keys of the probe's ``columns`` (read once: they are fixed)."""
        columns = getattr(self.probe, "columns", None)
        if (not isinstance(columns, (tuple, list))
                or not all(isinstance(c, str) for c in columns)):
            raise MetricValueError(
                self.name, "sample() returned a tuple, but the probe's columns "
                f"({type(columns).__name__}) are not a tuple of metric names")
        keys = tuple(make_key(prefix, self.name, c) for c in columns)
        if len(set(keys)) != len(keys):
            raise MetricValueError(self.name, f"its columns name a key twice: {columns!r}")
        if len(keys) > self.max_keys:
            raise MetricValueError(self.name, f"has {len(keys)} columns, over max_keys="
                                   f"{self.max_keys}")
        return keys

    def isolate(self) -> None:
        """Run this probe's calls in a worker thread from now on."""
        self.worker = IsolationWorker(self.name)

    def start(self) -> None:
        """Start the probe in the caller's thread; an isolated one starts lazily, in its worker."""
        if self.worker is None and not self.started:
            self.probe.start()
            self.started = True

    def sample(self) -> Any:
        """The probe's raw result (started first if it is not yet)."""
        worker = self.worker
        if worker is None:
            if not self.started:
                self.probe.start()
                self.started = True
            return self.probe.sample()
        limit = self.time_limit
        assert limit is not None  # isolate needs a time limit (checked by the options)
        if not self.started:
            worker.call(self.probe.start, limit)
            self.started = True
        return worker.call(self.probe.sample, limit)

    def stop(self) -> None:
        """Stop the probe if it runs; an abandoned (hung) isolated probe is left alone."""
        worker = self.worker
        was_started, self.started = self.started, False
        try:
            if worker is None:
                if was_started:
                    self.probe.stop()
            elif was_started and not worker.abandoned:
                assert self.time_limit is not None
                worker.call(self.probe.stop, self.time_limit)
        finally:
            if worker is not None:
                worker.close()

    @property
    def abandoned(self) -> bool:
        """True once an isolated call hung past the time limit and was abandoned."""
        return self.worker is not None and self.worker.abandoned

    def fail(self, exc: BaseException, where: str, max_failures: int, errors_key: str,
             fatal: bool = False) -> None:
        """Count a failure; disable after ``max_failures`` in a row (at once if ``fatal``).

        Warns (a :class:`memprobe.ProbeFailedWarning` with the traceback) at the
        first failure and when the probe is disabled.
        """
        self.errors_count += 1
        self.consecutive_failures += 1
        disable = fatal or self.consecutive_failures >= max_failures
        if disable:
            self.disabled = True
        if not self.warned or disable:
            import traceback  # here: only a failure needs it

            self.warned = True
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            then = (
                "it is disabled" if disable
                else f"it is disabled after {max_failures} failures in a row"
            )
            warnings.warn(
                f"memprobe probe {self.name!r} failed in {where}(): {type(exc).__name__}: "
                f"{exc}; counted in {errors_key}, {then}.\n{tb}",
                ProbeFailedWarning,
                stacklevel=6,
            )
