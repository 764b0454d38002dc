"""A probe inside a Prober: its schedule, its guards, its cost and its failures."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Callable, Union

from ._errors import MetricValueError, ProbeFailedWarning
from ._flatcode import FlatCode
from ._flatten import SiteKeyCap, compiled_flattener, flatten
from ._options import DEFAULT_MAX_KEYS
from ._worker import IsolationWorker

#: A compiled flatten of one probe's usual result shape (see memprobe._flatten).
Flattener = Callable[[dict[Any, Any]], Union[dict[str, Any], None]]


class ScheduledProbe:
    """One probe of a Prober with what the Prober tracks about it.

    ``every`` and ``interval_seconds`` say how often it may run; ``time_limit``,
    ``max_keys`` and ``worker`` (set when ``isolate=True``) guard the caller
    against it; ``cost_seconds`` is a moving average of its cost, for the
    budget; ``errors_count``, ``timeouts_count`` and ``consecutive_failures``
    count its failures, and ``disabled`` is set once it has failed too often.
    """

    __slots__ = (
        "bit",
        "consecutive_failures",
        "cost_seconds",
        "disabled",
        "errors_count",
        "every",
        "fast",
        "flat_code",
        "flattener",
        "interval_seconds",
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
        self.flattener: Flattener | None = None
        #: A built-in probe's own flat sampler (final keys, checked values), or None.
        self.fast: Callable[[], dict[str, Any] | None] | None = None
        #: ... and its source, which the Prober's plain path fuses with the others'.
        self.flat_code: FlatCode | None = None
        self.bit = 0  # this probe's bit in the Prober's shape of a sample
        self.errors_count = 0
        self.timeouts_count = 0
        self.consecutive_failures = 0
        self.disabled = False
        self.started = False
        self.warned = False

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

    @property
    def plain(self) -> bool:
        """Runs in every sample through its flat sampler, with no guard to apply."""
        return (self.fast is not None and self.started and not self.disabled
                and self.worker is None and self.every == 1 and not self.interval_seconds
                and self.time_limit is None)

    def sample_values(self, prefix: str, site_key_cap: SiteKeyCap) -> dict[str, Any]:
        """The probe's flat values through the ordinary path: ``sample()``, checks, flatten."""
        res = self.probe.sample() if self.started and self.worker is None else self.sample()
        if type(res) is not dict and not isinstance(res, Mapping):
            raise MetricValueError(
                self.name, f"sample() returned {type(res).__name__}, not a mapping"
            )
        if len(res) > self.max_keys:
            raise MetricValueError(
                self.name, f"sample() returned {len(res)} keys, over max_keys="
                f"{self.max_keys}; the sample is dropped",
            )
        run = self.flattener  # the compiled flatten of this probe's usual shape
        flat: dict[str, Any] | None = None if run is None else run({self.name: res})
        if flat is None:
            flat = flatten({self.name: res}, prefix=prefix,
                           site_key_cap=site_key_cap, max_keys=self.max_keys)
            self.flattener = compiled_flattener((self.name,), prefix)
            if len(flat) > self.max_keys:
                raise MetricValueError(
                    self.name, f"sample() flattened to {len(flat)} keys, over max_keys="
                    f"{self.max_keys}; the sample is dropped",
                )
        return flat

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
