"""The Prober: runs probes around a loop, on a schedule and an overhead budget."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

from .._checks import check_bool, check_fraction, check_int, check_limit, check_seconds
from .._errors import ConfigError, show
from .._flatten import SiteKeyCap
from .._own import register as register_own
from .._pid import current_pid
from .._plugins import ProbeInfo, collect_probes, get_plugin_manager, unknown_probe_error
from .._registry import describe_key
from .._sample import Number, Sample
from ..keys import make_key
from ..leak._alarm import LeakAlarm, OnLeak
from ..metrics import Metric
from ._alarm_checks import AlarmChecks, judge_history, make_alarm
from ._budget import BudgetSplit
from ._components import bind_keys, build_probes, build_sinks, declarations, discard
from ._fork import renew_in_child
from ._history import MAX_HISTORY, History
from ._hooks import SampleHooks
from ._options import ProbesOption, check_tags, parse_probes, parse_sinks
from ._overhead import Overhead
from ._phases import Mark, Phases, check_label
from ._scheduled import ScheduledProbe
from ._step import INT64 as _INT64, StepCheck
from ._sink_writer import SinkWriter
from ._sinks import Sink
from ._tier_feed import TierFeed

if TYPE_CHECKING:
    from ..leak._verdicts import Report

F = TypeVar("F", bound=Callable[..., Any])

_perf_counter = time.perf_counter
_time = time.time
_get_ident = threading.get_ident


class Prober:
    """Runs memory probes around any Python loop.

    ```pycon
    >>> with Prober(probes=["process", "gc"]) as prober:
    ...     for i in range(3):
    ...         values = prober.sample(step=i)
    >>> values["memprobe/process/rss_bytes"] > 0
    True

    ```

    :param probes: probe names, or ``{name: options}``. Besides its own options
        each probe takes ``every`` and ``interval_seconds``. Default: process and gc.
    :param every: a probe runs at most once per this many ``sample()`` calls.
    :param interval_seconds: and at most once per this many seconds.
    :param budget: the fraction of wall time all probes together may take
        (e.g. ``0.01``); costly probes are spaced out to stay under it, and what
        cheap probes do not use goes to the costly ones.
    :param history: how many samples ``history`` keeps (a ring, allocated up front).
        The judged whole-process metrics (without ``on_leak``: the resident sizes)
        are also kept at every time scale of the whole run, in bounded memory
        (:class:`memprobe.Tiers`), so that :meth:`report` and the leak alarm judge
        more than the history's window.
    :param max_failures: a probe that fails this many times in a row is disabled.
    :param sink: a path (a JSONL file; ``{pid}`` is replaced) or a :class:`Sink`.
    :param sinks: sinks by registered name with their options, e.g.
        ``{"jsonl": {"path": "run.jsonl", "tags": {"run": 1}}}``; several allowed.
    :param tags: extra fields for each JSONL line of a path ``sink``.
    :param prefix: the first component of every key.
    :param max_site_keys: site keys (allocation sites, type names: the keys under a
        :class:`SiteMap`) held at a time (:class:`SiteKeyCap`); the rest go to ``.../other``.
    :param load_entrypoints: load third-party plugins from the ``memprobe`` entry points.
    :param plugin_manager: use this plugin manager instead of a new one.
    :param time_limit_seconds: the default per-probe time limit (``None``: none).
        A probe whose ``sample()`` takes longer has its values dropped, counted
        in ``<prefix>/errors/<probe>`` and ``<prefix>/timeouts/<probe>``.
    :param on_leak: the leak alarm (:class:`LeakAlarm`, as ``prober.alarm``): ``"warn"``
        or a callable given each newly leaking :class:`Verdict`, once per metric.
    :param leak_check_every: with ``on_leak``, judge ``history`` every this many samples.
    :param leak_confirmations: alarm only when a metric is judged leaking at this many
        checks in a row.
    :param leak_options: options of :func:`memprobe.analyze_samples` for the alarm.
    :param capture_on_leak: with ``on_leak``, name the culprits of a first alarm that
        names none: a tracemalloc window and object counts for 10 s (``True``),
        ``False``, or :class:`memprobe.capture.CulpritCapture` options (docs/leaks.md).
    :param oom_capture_hours: with ``on_leak``, open the capture as soon as a check
        forecasts that the resident size reaches its memory limit within this many
        hours (``prober.report()``'s ``hours_to_oom``), before the alarm is confirmed,
        so that the culprit is on record before the process is killed (None: never).

    Every probe also takes the guard options ``time_limit_seconds``, ``max_keys`` (most
    keys one sample may return, default 10,000) and ``isolate`` (run it in a worker
    thread, abandoned and disabled if it hangs past its time limit; needs a time limit).
    """

    def __init__(
        self,
        probes: ProbesOption = None,
        *,
        every: int = 1,
        interval_seconds: float = 0.0,
        budget: float | None = None,
        history: int = 1000,
        max_failures: int = 3,
        sink: str | os.PathLike[str] | Sink | None = None,
        sinks: Mapping[str, Mapping[str, Any] | None] | None = None,
        tags: Mapping[str, Any] | None = None,
        prefix: str = "memprobe",
        max_site_keys: int = 100,
        load_entrypoints: bool = True,
        plugin_manager: pluggy.PluginManager | None = None,
        time_limit_seconds: float | None = None,
        on_leak: OnLeak | None = None,
        leak_check_every: int = 50,
        leak_confirmations: int = 2,
        leak_options: Mapping[str, Any] | None = None,
        capture_on_leak: bool | Mapping[str, Any] = True,
        oom_capture_hours: float | None = 1.0,
    ) -> None:
        if time_limit_seconds is not None:
            time_limit_seconds = check_limit("time_limit_seconds", time_limit_seconds)
        self.every = check_int("every", every, 1)
        self.interval_seconds = check_seconds("interval_seconds", interval_seconds)
        self.budget = None if budget is None else check_fraction("budget", budget)
        check_int("history", history, 1)
        if history > MAX_HISTORY:
            raise ConfigError("history", f"must be at most {MAX_HISTORY} (its storage is "
                              f"allocated up front), got {history}")
        self.max_failures = check_int("max_failures", max_failures, 1)
        check_int("max_site_keys", max_site_keys, 0)
        if not isinstance(prefix, str):
            raise ConfigError("prefix", f"must be a str, got {show(prefix)}")
        self.prefix = prefix
        check_bool("load_entrypoints", load_entrypoints)
        if plugin_manager is not None and not isinstance(plugin_manager, pluggy.PluginManager):
            raise ConfigError("plugin_manager",
                              f"must be a pluggy.PluginManager, got {show(plugin_manager)}")
        tags = check_tags(tags, sink)
        sink_spec = parse_sinks(sinks)
        alarm = make_alarm(on_leak, leak_check_every, leak_confirmations, leak_options,
                           capture_on_leak, oom_capture_hours)
        self._pm = plugin_manager or get_plugin_manager(load_entrypoints=load_entrypoints)
        self.registry: dict[str, ProbeInfo] = collect_probes(self._pm)
        self._probes: list[ScheduledProbe] = build_probes(
            parse_probes(probes), self.registry, every=self.every,
            interval_seconds=self.interval_seconds, time_limit=time_limit_seconds)
        try:
            sinks = build_sinks(sink, tags, sink_spec, self._pm)
        except BaseException:
            discard(self._probes, [])
            raise
        bind_keys(self._probes, prefix)
        self._started = False
        self.history = History(history)
        self.site_key_cap = SiteKeyCap(max_site_keys)
        self._lock = threading.RLock()
        self._sampling, self._calls = 0, 0  # the thread inside sample() (refused re-entry)
        self._reentrant = 0
        self._any_errors = False  # a probe has failed, or a call was refused: errors/...
        self._budget_split = BudgetSplit()
        self._hooks = SampleHooks(self._pm, prefix)
        self._check_step = StepCheck(self._hooks.errors, prefix)
        self._sinks = SinkWriter(sinks, self._hooks)
        self._overhead = Overhead(prefix)
        self._phases = Phases()
        # The alarm's checks, or without one the resident sizes' tiers (report() judges both)
        self._judging: AlarmChecks | TierFeed = TierFeed(prefix) if alarm is None else \
            AlarmChecks(alarm, prefix, self.history, self._hooks.failed)
        renew_in_child(self, Prober._renew_in_child)
        register_own(self)  # what it holds is memprobe's, not counted as the user's

    def _renew_in_child(self) -> None:
        """In a forked child: a fresh lock, and history, alarm and overhead of the
        child's own samples only (judged with the parent's, two processes read as one)."""
        self._lock = threading.RLock()
        self._sampling = 0
        self.history.clear()
        self._judging.reset()
        self._overhead.reset()

    @property
    def alarm(self) -> LeakAlarm | None:
        """The leak alarm, when ``on_leak`` is given."""
        return self._judging.alarm

    # -- names ----------------------------------------------------------------
    @property
    def probe_names(self) -> list[str]:
        """The names of this Prober's probes, in order."""
        return [sp.name for sp in self._probes]

    def probe(self, name: str) -> Any:
        """The probe object named ``name``."""
        for sp in self._probes:
            if sp.name == name:
                return sp.probe
        raise unknown_probe_error(name, self.probe_names)

    @property
    def sink(self) -> Sink | None:
        """The sink given as ``sink=`` (or the first of ``sinks=``), else None."""
        return self._sinks.named[0][1] if self._sinks else None

    @property
    def sinks(self) -> list[Sink]:
        """Every sink this Prober writes to, in order."""
        return [s for _, s in self._sinks.named]

    def describe(self, key: str) -> Metric:
        """The declaration of a key this Prober emits (its probe's ``metrics``, the
        Prober's own sections' :data:`memprobe.metrics.PROBER_METRICS`, else
        :func:`memprobe.metrics.default_metric`): its description, unit and kind."""
        return describe_key(key, self.prefix, declarations(self._probes))

    # -- lifecycle --------------------------------------------------------------
    def start(self) -> Prober:
        """Start every probe (a probe that fails to start is counted and disabled)."""
        with self._lock:
            if self._started:
                return self
            self._started = True
            self._hooks.collect()
            for sp in self._probes:
                try:
                    sp.start()
                except Exception as exc:
                    self._fail(sp, exc, "start", fatal=True)
        return self

    def stop(self) -> None:
        """Stop every probe and close the sinks. Safe to call twice."""
        with self._lock:
            if not self._started:
                return
            self._started = False
            if self.alarm is not None:
                self.alarm.abandon_capture()
            for sp in self._probes:
                try:
                    sp.stop()
                except Exception as exc:
                    self._fail(sp, exc, "stop")
            self._sinks.close()

    def __enter__(self) -> Prober:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __call__(self, fn: F) -> F:
        """Use the Prober as a decorator: one sample after each call of ``fn``."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.start()
            try:
                return fn(*args, **kwargs)
            finally:
                self.sample()

        wrapper.prober = self  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a memprobe.Prober is not picklable; build one in the process that "
                        "samples (memprobe_rllib.MemoryProbeCallback does this for each EnvRunner)")

    # -- sampling -------------------------------------------------------------
    def sample(self, step: int | None = None, *, force: bool = False) -> dict[str, Number]:
        """Run the probes that are due and return this sample's flat values.

        :param step: the caller's step (iteration, episode); stored with the sample.
            An int (``np.int64``), or a float time; a bool or a step beyond 64 bits is
            counted in ``<prefix>/errors/step`` (the sample is taken without it).
        :param force: run every enabled probe, due or not.
        :returns: a new dict, ``{"<prefix>/<probe>/<metric>": number}`` of the probes
            that ran, ``<prefix>/errors/...`` once anything failed, ``overhead/...``;
            empty when no probe was due. Changing it changes nothing in ``history``.

        Never raises because of a probe, a hook or a sink: a failing probe is counted,
        warned about once and disabled after ``max_failures`` failures in a row. A call
        made inside ``sample()`` (a signal handler, a hook) returns ``{}`` at once, counted
        in ``<prefix>/errors/reentrant``.
        """
        if step is not None and (type(step) is not int or not -_INT64 <= step < _INT64):
            step = self._check_step(step)
        me = _get_ident()
        if self._sampling == me:
            self._reentrant += 1
            self._any_errors = True
            self._hooks.reentered()
            return {}
        with self._lock:
            self._sampling = me
            try:
                if not self._started:
                    self.start()
                t0 = _perf_counter()
                values = self._run_probes(t0, force)
                if values is None:
                    return {}
                hooks = self._hooks
                if self._any_errors or hooks.errors:
                    self._add_errors(values)
                if hooks.derive:
                    hooks.run_derive(values, self)
                return self._finish(values, t0, step)
            finally:
                self._sampling = 0

    def _run_probes(self, t0: float, force: bool) -> dict[str, Number] | None:
        """Each probe that is due, in order: its values under their keys, then its cost
        (``overhead/<probe>_seconds``). None when no probe ran (``{}`` with ``force``)."""
        calls = self._calls = self._calls + 1
        budget = self.budget  # without one, only a probe's interval needs the clock
        share = None if budget is None else self._budget_split.share(t0, budget, self._probes)
        keys: list[str] = []
        row: list[Number] = []
        t1 = t0
        for sp in self._probes:
            if sp.disabled or not (force or sp.due(calls, t1, share)):
                continue
            got: tuple[Sequence[str], Sequence[Number]] | None
            try:
                got = sp.sample_values(self.prefix, self.site_key_cap)
            except (Exception, SystemExit) as exc:  # a plugin's sys.exit() must not end the job
                if sp.abandoned:
                    sp.timeouts_count += 1
                self._fail(sp, exc, "sample", fatal=sp.abandoned)
                got = None
            t2 = _perf_counter()
            cost = t2 - t1
            t1 = t2
            late = None if got is None else sp.over_time_limit(cost)
            if late is not None:
                got = None
                self._fail(sp, late, "sample")
            sp.ran(calls, t2, cost, budget is not None, got is not None)
            if got is not None:
                keys += got[0]
                keys.append(sp.overhead_key)
                row += got[1]
                row.append(cost)
        self._overhead.probes_ran(t0, t1)
        if not keys:
            return {} if force else None
        return dict(zip(keys, row))

    def _finish(self, values: dict[str, Number], t0: float,
                step: int | None) -> dict[str, Number]:
        """The end of a sample: the overhead metrics, the history, the sinks and
        ``memprobe_sample_end`` hooks, the leak alarm."""
        self._overhead.add_values(values, t0, _perf_counter())
        judging = self._judging
        judging.add_retained(values)
        now = _time()
        pid = current_pid()
        self.history.append(now, step, pid, values)
        hooks = self._hooks
        if self._sinks.named or hooks.end:
            sample = Sample(now, step, pid, values, self._phases.labels)
            self._sinks.write(sample)
            if hooks.end:
                hooks.run_end(sample, self)
        line = judging.after_sample(values, now, step, pid)  # a capture's culprits
        if line is not None:
            self._sinks.write(line)
        return values

    def _fail(self, sp: ScheduledProbe, exc: BaseException, where: str,
              fatal: bool = False) -> None:
        self._any_errors = True
        sp.fail(exc, where, self.max_failures, make_key(self.prefix, "errors", sp.name), fatal)

    def _add_errors(self, values: dict[str, Number]) -> None:
        prefix = self.prefix
        for sp in self._probes:
            sp.add_failure_counts(values, prefix)
        for name, n in self._hooks.errors.items():
            values[make_key(prefix, "errors", name)] = n
        if self._reentrant:
            values[make_key(prefix, "errors", "reentrant")] = self._reentrant

    # -- marks and spans (memprobe.engine._phases) -------------------------------------
    @property
    def marks(self) -> Sequence[Mark]:
        """The latest marks and span edges (at most 1,000), oldest first."""
        return self._phases.marks

    @property
    def current_phase(self) -> str | None:
        """The label of the innermost open span (``"train/eval"`` when nested), or None."""
        return self._phases.current

    def mark(self, label: str, *, step: int | None = None) -> Mark:
        """Record a labelled point: take a sample now (every probe, so the values are
        those of this moment), labelled ``label``; it costs one full sample.

        :param step: the sample's step; default: the step of the latest sample.
        :returns: the :class:`Mark`, also appended to ``prober.marks``.
        """
        return self._labelled(check_label(label), "mark", step)

    @contextlib.contextmanager
    def phase(self, label: str, *, step: int | None = None) -> Iterator[Mark]:
        """A labelled span: a sample at entry and at exit (every probe), and every
        sample taken inside labelled with it.

        ```pycon
        >>> from memprobe import Prober
        >>> with Prober(probes=["gc"]) as prober, prober.phase("eval"):
        ...     values = prober.sample(step=1)
        >>> [(m.label, m.kind) for m in prober.marks]
        [('eval', 'start'), ('eval', 'end')]

        ```

        :param step: the step of the entry and exit samples; default: the latest.
        """
        start = self.start_phase(label, step=step)
        try:
            yield start
        finally:
            self.end_phase(label, step=step)

    def start_phase(self, label: str, *, step: int | None = None) -> Mark:
        """Open a span (for callbacks where a ``with`` block cannot span the phase,
        such as RLlib's ``on_evaluate_start``); :meth:`end_phase` closes it."""
        phases = self._phases
        with self._lock:
            phases.push(check_label(label))
            try:
                return self._labelled(phases.current or label, "start", step)
            except BaseException:
                phases.pop()
                raise

    def end_phase(self, label: str | None = None, *, step: int | None = None) -> Mark:
        """Close the innermost open span (``label``, when given, must be its label).

        :raises ConfigError: no span is open, or the innermost one has another label.
        """
        phases = self._phases
        with self._lock:
            phases.check_innermost(label)
            try:
                return self._labelled(phases.current or "", "end", step)
            finally:
                phases.pop()

    def _labelled(self, label: str, kind: str, step: int | None) -> Mark:
        phases = self._phases
        with self._lock:  # another thread's sample must not take this sample's labels
            if step is None and len(self.history):
                step = self.history[-1].step
            phases.set_labels({"mark": label} if kind == "mark" else {"phase_edge": kind})
            t = time.time()
            try:
                self.sample(step, force=True)
            finally:
                phases.set_labels()
            mark = Mark(label, kind, t, step)
            phases.marks.append(mark)
            return mark

    # -- reading back -----------------------------------------------------------
    def report(self, **options: Any) -> Report:
        """Leak verdicts on this Prober's ``history``, judged with its ``prefix``: the
        judged whole-process metrics at every time scale of the run (the latest samples,
        coarser tiers, the whole run), each verdict resting on the scale that tells most
        (without ``on_leak``, the resident sizes; the other metrics on the history).

        Options go to :func:`memprobe.analyze_samples` (``thresholds``,
        ``warmup``, ``min_points``...).
        """
        return judge_history(self.history, self._lock, self.prefix, self._judging,
                             **options)

    def series(self, key: str) -> tuple[list[float], list[float]]:
        """``(x, y)`` for one metric over ``history``; x is the step, or the sample index."""
        with self._lock:
            return self.history.series(key)

    @property
    def latest(self) -> dict[str, Number]:
        """The most recent value of every metric in ``history``."""
        with self._lock:
            return self.history.latest()
