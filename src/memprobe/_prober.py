"""The Prober: runs probes around a loop, on a schedule and an overhead budget."""

from __future__ import annotations

import functools
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pluggy

from ._alarm import LeakAlarm, OnLeak, check_leak_options
from ._alarm_capture import check_capture_option
from ._budget import BudgetSplit
from ._components import bind_keys, build_probes, build_sinks, describe_key, discard
from ._errors import ConfigError, ProbeFailedWarning, show
from ._flatten import SiteKeyCap
from ._history import MAX_HISTORY, History
from ._hooks import SampleHooks
from ._options import (
    ProbesOption,
    check_bool,
    check_fraction,
    check_int,
    check_limit,
    check_seconds,
    check_tags,
    parse_probes,
    parse_sinks,
)
from ._phases import PhaseMixin
from ._plugins import ProbeInfo, collect_probes, get_plugin_manager, unknown_probe_error
from ._sample import Number
from ._sampling import PlainSampler, SamplingMixin
from ._scheduled import ScheduledProbe
from ._sinks import JsonlSink, Sink
from .keys import make_key
from .metrics import Metric

F = TypeVar("F", bound=Callable[..., Any])

# Every Prober alive in this process, so that a forked child can renew them.
_LIVE_PROBERS: weakref.WeakSet[Prober] = weakref.WeakSet()


def _renew_after_fork() -> None:
    """In a forked child: a fresh lock (a parent's thread may have held it), and a
    history, alarm and overhead fraction of the child's own samples only (the
    parent's samples judged with the child's would read two processes as one)."""
    for prober in list(_LIVE_PROBERS):
        prober._renew_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_after_fork)


class Prober(SamplingMixin, PhaseMixin):
    """Runs memory probes around any Python loop.

    >>> with Prober(probes=["process", "gc"]) as prober:
    ...     for i in range(3):
    ...         values = prober.sample(step=i)
    >>> values["memprobe/process/rss_bytes"] > 0
    True

    :param probes: probe names, or ``{name: options}``. Besides its own options
        each probe takes ``every`` and ``interval_seconds``. Default: process and gc.
    :param every: a probe runs at most once per this many ``sample()`` calls.
    :param interval_seconds: and at most once per this many seconds.
    :param budget: the fraction of wall time all probes together may take
        (e.g. ``0.01``); costly probes are spaced out to stay under it, and what
        cheap probes do not use goes to the costly ones.
    :param history: how many samples ``history`` keeps (a ring, allocated up front).
    :param max_failures: a probe that fails this many times in a row is disabled.
    :param sink: a path (a JSONL file; ``{pid}`` is replaced) or a :class:`Sink`.
    :param sinks: sinks by registered name with their options, e.g.
        ``{"jsonl": {"path": "run.jsonl", "tags": {"run": 1}}}``; several allowed.
    :param tags: extra fields for each JSONL line of a path ``sink``.
    :param prefix: the first component of every key.
    :param max_site_keys: distinct site keys (allocation sites, type names: the keys
        under a :class:`SiteMap`) ever emitted; the rest are summed into ``.../other``.
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

    Every probe also takes the guard options ``time_limit_seconds``, ``max_keys``
    (most keys one sample may return, default 10,000; over it the sample is an
    error) and ``isolate`` (run the probe in a worker thread, so that a probe
    which hangs past its time limit is abandoned and disabled instead of
    blocking the caller; needs a time limit; costs a thread hand-off per sample).
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
            raise ConfigError(
                "plugin_manager", f"must be a pluggy.PluginManager, got {show(plugin_manager)}"
            )
        tags = check_tags(tags, sink)
        sink_spec = parse_sinks(sinks)
        #: The leak alarm, when ``on_leak`` is given.
        self.alarm: LeakAlarm | None = None
        if on_leak is not None:
            self.alarm = LeakAlarm(on_leak, check_every=leak_check_every,
                                   confirmations=leak_confirmations, options=leak_options,
                                   capture=capture_on_leak)
        else:
            check_int("leak_check_every", leak_check_every, 1)
            check_int("leak_confirmations", leak_confirmations, 1)
            check_leak_options(leak_options)
            if capture_on_leak is not True:
                check_capture_option(capture_on_leak)
        self._pm = plugin_manager or get_plugin_manager(load_entrypoints=load_entrypoints)
        self.registry: dict[str, ProbeInfo] = collect_probes(self._pm)
        self._probes: list[ScheduledProbe] = build_probes(
            parse_probes(probes), self.registry, every=self.every,
            interval_seconds=self.interval_seconds, time_limit=time_limit_seconds)
        try:
            self._sinks: list[tuple[str, Sink]] = build_sinks(sink, tags, sink_spec, self._pm)
        except BaseException:
            discard(self._probes, [])
            raise
        # Each sink, and for the built-in JSONL sink its writer of a sample's fields.
        self._sink_writers: list[tuple[str, Sink, Callable[..., None] | None]] = [
            (name, s, s._write_values if type(s).write is JsonlSink.write else None)
            for name, s in self._sinks]
        self._sample_sinks = any(w is None for _, _, w in self._sink_writers)
        self._started = False
        self.history = History(history)
        self.site_key_cap = SiteKeyCap(max_site_keys)
        self._lock = threading.RLock()
        self._calls = 0
        self._budget_split = BudgetSplit()
        self._sampling = 0  # the thread id inside sample(), to refuse re-entry
        self._reentrant = 0
        self._t_start = 0.0
        self._t_first = 0.0
        self._window_probe_seconds = 0.0
        bind_keys(self._probes, prefix)
        self._key_sample_seconds = make_key(prefix, "overhead", "sample_seconds")
        self._key_fraction = make_key(prefix, "overhead", "fraction")
        self._key_check_retained = make_key(prefix, "overhead", "check_retained_bytes")
        self._hooks = SampleHooks(self._pm, prefix)
        self._any_errors = False  # a probe or a hook has failed: sample() adds errors/...
        self._init_phases()
        # sample() for a Prober whose probes all run in every sample, or None: _plain_probes.
        self._plain: PlainSampler | None = None
        self._plain_shape = -1
        _LIVE_PROBERS.add(self)

    def _renew_in_child(self) -> None:
        self._lock = threading.RLock()
        self._sampling = 0
        self.history.clear()
        if self.alarm is not None:
            self.alarm.reset()  # a capture the parent had open is abandoned
        self._check_retained = 0
        self._check_retained_due = False
        self._t_start = time.perf_counter()
        self._t_first = 0.0
        self._window_probe_seconds = 0.0

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
        return self._sinks[0][1] if self._sinks else None

    @property
    def sinks(self) -> list[Sink]:
        """Every sink this Prober writes to, in order."""
        return [s for _, s in self._sinks]

    def describe(self, key: str) -> Metric:
        """The declaration of a key this Prober emits: its description, unit and kind.

        A probe's metrics come from its ``metrics`` declarations, the Prober's own
        sections (``overhead``, ``errors``...) from :data:`memprobe.metrics.PROBER_METRICS`;
        anything else (a derived metric) gets :func:`memprobe.metrics.default_metric`.
        """
        return describe_key(key, self.prefix, self._probes)

    # -- lifecycle --------------------------------------------------------------
    def start(self) -> Prober:
        """Start every probe (a probe that fails to start is counted and disabled)."""
        with self._lock:
            if self._started:
                return self
            self._started = True
            self._t_start = time.perf_counter()
            self._hooks.collect()
            for sp in self._probes:
                try:
                    sp.start()
                except Exception as exc:
                    self._fail(sp, exc, "start", fatal=True)
            self._plain_probes()
        return self

    def stop(self) -> None:
        """Stop every probe and close the sinks. Safe to call twice."""
        with self._lock:
            if not self._started:
                return
            self._started = False
            if self.alarm is not None:
                self.alarm.abandon_capture()
            self._plain = None
            for sp in self._probes:
                try:
                    sp.stop()
                except Exception as exc:
                    self._fail(sp, exc, "stop")
            for name, s in self._sinks:
                try:
                    s.close()
                except Exception as exc:  # a user's sink
                    which = "the sink" if name == "sink" else f"the sink {name!r}"
                    warnings.warn(f"memprobe: closing {which} failed: {exc!r}",
                                  ProbeFailedWarning, stacklevel=2)

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
        raise TypeError(
            "a memprobe.Prober is not picklable; build one in the process that samples "
            "(memprobe_rllib.MemoryProbeCallback does this for each EnvRunner)"
        )

    # -- reading back -----------------------------------------------------------
    def series(self, key: str) -> tuple[list[float], list[float]]:
        """``(x, y)`` for one metric over ``history``; x is the step, or the sample index."""
        with self._lock:
            return self.history.series(key)

    @property
    def latest(self) -> dict[str, Number]:
        """The most recent value of every metric in ``history``."""
        with self._lock:
            return self.history.latest()
