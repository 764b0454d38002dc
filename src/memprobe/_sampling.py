"""How the Prober takes one sample: the general path (schedule, budget, time limits,
failures, hooks) and, while every probe runs in every sample through its flat sampler,
a straight-line path compiled for the Prober's probes and sinks; then the end of a
sample (overhead metrics, history, sinks, the leak alarm)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._errors import ProbeError
from ._flatcode import Unusable, literal
from ._flatten import SiteKeyCap
from ._history import History, make_sample
from ._hooks import SampleHooks
from ._pid import _current as _pid_box  # current_pid() without the call
from ._sample import Number
from ._scheduled import ScheduledProbe
from ._sinks import Sink
from .keys import make_key

if TYPE_CHECKING:
    from ._alarm import LeakAlarm
    from ._budget import BudgetSplit

#: ``overhead/fraction`` is reported once the window it is measured over (from the
#: end of the first sample) is at least this long: before, it means nothing.
FRACTION_WINDOW_SECONDS = 1.0

_perf_counter = time.perf_counter
_time = time.time
_get_ident = threading.get_ident

#: The compiled plain path: ``(prober, step, force) -> values``.
PlainSampler = Callable[[Any, "int | None", bool], "dict[str, Number]"]


class SamplingMixin:
    """The Prober's ``sample()``: the state it keeps between samples is set up by the
    Prober's ``__init__``."""

    prefix: str
    budget: float | None
    max_failures: int
    history: History
    alarm: LeakAlarm | None
    site_key_cap: SiteKeyCap
    _probes: list[ScheduledProbe]
    _sinks: list[tuple[str, Sink]]
    _sink_writers: list[tuple[str, Sink, Callable[..., None] | None]]
    _sample_sinks: bool
    _hooks: SampleHooks
    _budget_split: BudgetSplit
    _lock: threading.RLock
    _labels: dict[str, str] | None
    _started: bool
    _any_errors: bool
    _sampling: int
    _reentrant: int
    _calls: int
    _t_first: float
    _window_probe_seconds: float
    _check_retained: int
    _check_retained_due: bool
    _check_values: dict[str, Number]
    _key_sample_seconds: str
    _key_fraction: str
    _key_check_retained: str
    _plain: PlainSampler | None
    _plain_shape: int

    if TYPE_CHECKING:  # the Prober's and PhaseMixin's
        def start(self) -> Any: ...

        def _check_leaks(self, alarm: LeakAlarm) -> None: ...

        def _finish_capture(self, alarm: LeakAlarm, now: float, step: int | None,
                            pid: int) -> None: ...

    # -- failures ---------------------------------------------------------------
    def _fail(self, sp: ScheduledProbe, exc: BaseException, where: str,
              fatal: bool = False) -> None:
        self._any_errors = True
        self._plain = None
        sp.fail(exc, where, self.max_failures, make_key(self.prefix, "errors", sp.name), fatal)

    def _hook_failed(self, name: str, hook: str, exc: BaseException) -> None:
        self._any_errors = True
        self._plain = None
        self._hooks.failed(name, hook, exc)

    # -- sampling ---------------------------------------------------------------
    def sample(self, step: int | None = None, *, force: bool = False) -> dict[str, Number]:
        """Run the probes that are due and return this sample's flat values.

        :param step: the caller's step (iteration, episode); stored with the sample.
        :param force: run every enabled probe, due or not.
        :returns: a new dict, ``{"<prefix>/<probe>/<metric>": number}`` for the
            probes that ran, plus ``<prefix>/errors/...`` once anything has failed
            and ``<prefix>/overhead/...``. Empty when no probe was due. Changing it
            changes nothing in ``history``.

        Never raises because of a probe: a failing probe is counted, warned
        about once and disabled after ``max_failures`` failures in a row. A
        call made while this thread is already inside ``sample()`` (a signal
        handler, a hook) returns ``{}`` at once and is counted in
        ``<prefix>/errors/reentrant``.
        """
        plain = self._plain
        if plain is not None:
            return plain(self, step, force)
        return self._sample_guarded(step, force)

    def _sample_guarded(self, step: int | None, force: bool) -> dict[str, Number]:
        """``sample()`` on the general path: the re-entry guard, the lock, ``_sample``."""
        me = _get_ident()
        if self._sampling == me:
            self._reentrant += 1
            self._any_errors = True
            self._plain = None
            return {}
        with self._lock:
            self._sampling = me
            try:
                return self._sample(step, force)
            finally:
                self._sampling = 0

    def _plain_probes(self) -> None:
        """``_plain`` while every probe is ``plain`` and nothing has failed (cleared by a
        failure and ``stop()``; the plain sampler checks ``budget`` and the hooks' errors)."""
        ok = self._started and not (self._any_errors or self._hooks.derive)
        probes = self._probes
        self._plain_shape = functools.reduce(int.__or__, (sp.bit for sp in probes), 2)
        self._plain = self._compile_plain() if ok and probes and all(
            sp.plain and sp.flat_code is not None for sp in probes) else None

    def _compile_plain(self) -> PlainSampler:
        """``sample()`` for this Prober while every probe runs in every sample through its
        flat sampler: the probes' flat code (``memprobe._flatcode``) fused into one
        function with the general path's steps for that case, so that a sample builds
        one dict and calls no probe function; what does not change between samples is
        bound as constants (as ``flatten`` compiles a plan). The first probe that fails
        or cannot give its values now hands the rest of the sample to ``_plain_rest``;
        a re-entered call, a budget, a failed hook or another path chosen meanwhile go
        to the general path; the leak alarm and sinks that need a :class:`Sample` go
        through ``_finish``."""
        ns: dict[str, Any] = {
            "perf_counter": _perf_counter, "get_ident": _get_ident, "time_now": _time,
            "pid_box": _pid_box, "hook_errors": self._hooks.errors,
            "key_fraction": self._key_fraction,
            "FRACTION_WINDOW_SECONDS": FRACTION_WINDOW_SECONDS, "Unusable": Unusable,
        }
        n = len(self._probes)
        lines = [
            "def sample_plain(self, step, force):",
            "    me = get_ident()",
            "    if self._sampling == me or self.budget is not None or hook_errors:",
            "        return self._sample_guarded(step, force)",
            "    with self._lock:",
            "        if self._plain is not sample_plain:  # changed while this thread waited",
            "            return self._sample_guarded(step, force)",
            "        self._sampling = me",
            "        try:",
            "            t0 = perf_counter()",
            "            self._calls += 1",
        ]
        items: list[str] = []  # the values' dict display, probe by probe
        for i, sp in enumerate(self._probes):
            code = sp.flat_code
            assert code is not None
            tag = f"p{i}_"
            code.bind(tag, ns)
            body, probe_items = code.resolve(tag, f"t{i}", 16)
            so_far = f"{{{', '.join(items)}}}" if items else "None"
            args = f"{so_far}, {i}, t{i}, t0"
            lines += [
                "            try:",
                body,
                "            except Unusable:  # not usable now (e.g. forked): the ordinary path",
                f"                return self._plain_rest({args}, None, step, force)",
                "            except (Exception, SystemExit) as exc:  # a plugin's sys.exit()",
                f"                return self._plain_rest({args}, exc, step, force)",
                f"            t{i + 1} = perf_counter()",
            ]
            items += [probe_items, f"{literal(sp.overhead_key)}: t{i + 1} - t{i}"]
        items.append(f"{literal(self._key_sample_seconds)}: t{n} - t0")  # _finish sets it again
        lines += [
            f"            values = {{{', '.join(items)}}}",
            "            t_first = self._t_first",
            "            if t_first:",
            f"                self._window_probe_seconds += t{n} - t0",
        ]
        if self._sample_sinks or self._hooks.end:
            lines.append(f"            return self._finish(values, t0, {self._plain_shape}, step)")
        else:
            lines += [
                "            if self.alarm is not None or self._check_retained_due:",
                f"                return self._finish(values, t0, {self._plain_shape}, step)",
                f"            shape = {self._plain_shape}",
                "            if t_first:",
                f"                window = t{n} - t_first",
                "                if window >= FRACTION_WINDOW_SECONDS:",
                "                    values[key_fraction] = self._window_probe_seconds / window",
                f"                    shape = {self._plain_shape | 1}",
                "            else:",
                f"                self._t_first = t{n}",
                "            now = time_now()",
                "            pid = pid_box[0]",
                "            self.history.append(now, step, pid, values, shape)",
            ]
            for j, (name, _, write) in enumerate(self._sink_writers):
                ns[f"write_{j}"], ns[f"sink_{j}"] = write, name
                lines += [
                    "            try:",
                    f"                write_{j}(now, step, pid, values, self._labels)",
                    "            except Exception as exc:  # JsonlSink reports its own errors",
                    f"                self._hook_failed(sink_{j}, 'write', exc)",
                ]
            lines.append("            return values")
        lines += ["        finally:", "            self._sampling = 0", ""]
        exec(compile("\n".join(lines), f"<memprobe plain sample of {n} probes>", "exec"), ns)
        return ns["sample_plain"]  # type: ignore[no-any-return]

    def _plain_rest(self, values: dict[str, Number] | None, i: int, t1: float, t0: float,
                    exc: BaseException | None, step: int | None,
                    force: bool) -> dict[str, Number]:
        """The plain sample from its probe ``i`` on, after that probe raised ``exc`` or
        (``exc`` None) its flat sampler returned None: the general path's handling for
        that probe and the rest, then ``_finish``."""
        for j, sp in enumerate(self._probes[i:], i):
            flat: dict[str, Number] | None = None
            if j == i and exc is not None:
                self._fail(sp, exc, "sample")
            else:
                try:
                    fast = sp.fast if j > i else None
                    flat = fast() if fast is not None else None
                    if flat is None:
                        flat = sp.sample_values(self.prefix, self.site_key_cap)
                except (Exception, SystemExit) as e:  # a plugin's sys.exit()
                    self._fail(sp, e, "sample")
                    flat = None
            t2 = _perf_counter()
            if flat is not None:
                if values is None:  # a probe's flat dict is new: the first one is the result
                    values = flat
                else:
                    values.update(flat)
                values[sp.overhead_key] = t2 - t1
            t1 = t2
        values = self._probes_done(values, t0, t1, force)
        if values is None:
            return {}
        if self._any_errors:  # a probe failed just now
            self._add_errors(values)
        return self._finish(values, t0, -1, step)

    def _sample(self, step: int | None, force: bool) -> dict[str, Number]:
        if not self._started:
            self.start()
        t0 = t1 = _perf_counter()
        calls = self._calls = self._calls + 1
        budget = self.budget  # without one, only a probe's interval needs the clock
        probes = self._probes
        share = None if budget is None else self._budget_split.share(t0, budget, probes)
        values: dict[str, Number] | None = None
        shape = 2  # one bit per probe that ran through its fixed-shape fast sampler
        for sp in probes:
            if sp.disabled:
                continue
            if not force and (
                calls - sp.last_call < sp.every
                or ((share is not None or sp.interval_seconds) and not sp.due_by_time(t1, share))
            ):
                continue
            try:
                fast = sp.fast
                flat = fast() if fast is not None and sp.started else None
                if flat is None:
                    flat = sp.sample_values(self.prefix, self.site_key_cap)
                    shape = -1
                elif shape > 0:
                    shape |= sp.bit
            except (Exception, SystemExit) as exc:  # a plugin's sys.exit() must not end the job
                if sp.abandoned:
                    sp.timeouts_count += 1
                    self._fail(sp, exc, "sample", fatal=True)
                else:
                    self._fail(sp, exc, "sample")
                flat = None
            t2 = _perf_counter()
            cost = t2 - t1
            t1 = t2
            if sp.time_limit is not None and flat is not None and cost > sp.time_limit:
                sp.timeouts_count += 1
                flat = None
                self._fail(sp, ProbeError(
                    sp.name, f"sample() took {cost:.3g} s, over its time limit of "
                    f"{sp.time_limit:g} s; its values are dropped"), "sample")
            if budget is not None:  # a moving average of the cost, for the budget
                avg = sp.cost_seconds
                sp.cost_seconds = 0.8 * avg + 0.2 * cost if avg else cost
            sp.last_call = calls
            sp.last_time = t2
            if flat is not None:
                if sp.consecutive_failures:
                    sp.consecutive_failures = 0
                if values is None:  # a probe's flat dict is new: the first one is the result
                    values = flat
                else:
                    values.update(flat)
                values[sp.overhead_key] = cost
        values = self._probes_done(values, t0, t1, force)
        if values is None:
            return {}
        hooks = self._hooks
        if self._any_errors or hooks.errors:
            self._add_errors(values)
            shape = -1
        if hooks.derive:
            hooks.run_derive(values, self)
            shape = -1
        return self._finish(values, t0, shape, step)

    def _probes_done(self, values: dict[str, Number] | None, t0: float, t1: float,
                     force: bool) -> dict[str, Number] | None:
        """After the probes, from ``t0`` to ``t1``: their time joins the overhead
        fraction's window. The values; ``{}`` when no probe gave any and ``force`` asks
        for a sample anyway; None when there is no sample to finish."""
        if self._t_first:
            self._window_probe_seconds += t1 - t0
        if values is None and force:
            return {}
        return values

    def _finish(self, values: dict[str, Number], t0: float, shape: int,
                step: int | None) -> dict[str, Number]:
        """The end of a sample: the overhead metrics, the history, the sinks and
        ``memprobe_sample_end`` hooks, the leak alarm."""
        t3 = _perf_counter()
        values[self._key_sample_seconds] = t3 - t0
        if self._check_retained_due:  # the leak check after the previous sample kept memory
            self._check_retained_due = False
            values[self._key_check_retained] = self._check_retained
            values.update(self._check_values)  # the check's forecast, for readers of the file
            shape = -1
        if self._t_first:
            window = t3 - self._t_first
            if window >= FRACTION_WINDOW_SECONDS:
                values[self._key_fraction] = self._window_probe_seconds / window
                if shape > 0:
                    shape |= 1
        else:
            self._t_first = t3
        now = _time()
        pid = _pid_box[0]
        self.history.append(now, step, pid, values, shape)
        hooks = self._hooks
        labels = self._labels  # inside a phase, or a mark's sample
        sample = make_sample(now, step, pid, values) if self._sample_sinks or hooks.end else None
        if sample is not None and labels is not None:
            sample.__dict__["labels"] = labels
        for name, s, write in self._sink_writers:
            try:
                if write is not None:
                    write(now, step, pid, values, labels)
                else:
                    s.write(sample)
            except Exception as exc:  # a user's sink; JsonlSink reports its own errors
                self._hook_failed(name, "write", exc)
        if hooks.end:
            hooks.run_end(sample, self)
        alarm = self.alarm
        if alarm is not None and alarm.tick():
            self._check_leaks(alarm)
        if alarm is not None and alarm.capture_due():
            self._finish_capture(alarm, now, step, pid)
        return values

    def _add_errors(self, values: dict[str, Number]) -> None:
        prefix = self.prefix
        for sp in self._probes:
            if sp.errors_count:
                values[make_key(prefix, "errors", sp.name)] = sp.errors_count
                if sp.timeouts_count:
                    values[make_key(prefix, "timeouts", sp.name)] = sp.timeouts_count
        for name, n in self._hooks.errors.items():
            values[make_key(prefix, "errors", name)] = n
        if self._reentrant:
            values[make_key(prefix, "errors", "reentrant")] = self._reentrant

