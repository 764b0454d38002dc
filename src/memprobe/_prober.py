"""The Prober: runs probes around a loop, on a schedule and an overhead budget."""

from __future__ import annotations

import functools
import os
import queue
import sys
import threading
import time
import traceback
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pluggy

from ._errors import (
    ConfigError,
    MetricValueError,
    ProbeError,
    ProbeFailedWarning,
    did_you_mean,
    show,
)
from ._flatten import (
    KeyCap,
    Number,
    PlanRunner,
    _check_number,
    compiled_flattener,
    flatten,
    sanitize_key,
)
from ._pid import current_pid
from ._plugins import ProbeInfo, collect_probes, get_plugin_manager, unknown_probe_error
from ._sinks import JsonlSink, Sink

F = TypeVar("F", bound=Callable[..., Any])

#: The probes a Prober runs when none are named: cheap enough to leave on.
DEFAULT_PROBES = ("process", "gc")
#: Options every probe accepts in ``probes={name: {...}}``, handled by the Prober.
SCHEDULE_OPTIONS = ("every", "interval_seconds")
#: Options every probe accepts that guard the caller against a hostile probe.
GUARD_OPTIONS = ("time_limit_seconds", "isolate", "max_keys")
_perf_counter = time.perf_counter
_time = time.time

#: The most keys one probe may return in one sample unless its ``max_keys`` says otherwise.
DEFAULT_MAX_KEYS = 10_000


# Every Prober alive in this process, so that a forked child can renew their locks.
_LIVE_PROBERS: weakref.WeakSet[Prober] = weakref.WeakSet()


def _renew_after_fork() -> None:
    """In a forked child: fresh locks, and a history of the child's own samples only.

    A thread of the parent that was sampling when another thread forked
    leaves the Prober's lock (and the shared tracemalloc lock) held forever
    in the child, so the child's first ``sample()`` would hang. The child
    has only the forking thread, so fresh locks are safe.

    The parent's samples are the parent's: kept in the child's history they
    would be judged with the child's by ``report()`` and the leak alarm, two
    processes' memory read as one series. The overhead fraction restarts too.
    """
    now = time.perf_counter()
    for prober in list(_LIVE_PROBERS):
        prober._lock = threading.RLock()
        prober.history.clear()
        prober._leak_streak.clear()
        prober._leak_alarmed.clear()
        prober._leak_samples = 0
        prober._t_start = now
        prober._probe_seconds_total = 0.0
    tm = sys.modules.get("memprobe.probes.tracemalloc")
    if tm is not None:
        vars(tm)["_lock"] = threading.Lock()  # its acquire_tracing() reads the global


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_after_fork)


class _Worker:
    """A daemon thread that runs an isolated probe's calls, so a hang can be abandoned."""

    __slots__ = ("_pid", "_queue", "abandoned", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[Any] | None = None
        self._pid = -1
        self.abandoned = False

    def call(self, fn: Callable[[], Any], timeout: float) -> Any:
        """``fn()`` in the worker thread; ``TimeoutError`` if it takes over ``timeout`` s."""
        if self._queue is None or self._pid != os.getpid():  # first call, or forked since
            self._queue = queue.SimpleQueue()
            self._pid = os.getpid()
            threading.Thread(
                target=self._run, args=(self._queue,), name=f"memprobe-{self.name}", daemon=True
            ).start()
        box: list[Any] = [None, None]
        done = threading.Event()
        self._queue.put((fn, box, done))
        if not done.wait(timeout):
            self.abandoned = True
            self._queue = None  # the hung thread keeps its queue; nothing more is sent to it
            raise TimeoutError(f"did not return within {timeout:g} s")
        if box[1] is not None:
            raise box[1]
        return box[0]

    @staticmethod
    def _run(q: queue.SimpleQueue[Any]) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            fn, box, done = item
            try:
                box[0] = fn()
            except BaseException as exc:  # handed to the caller, who decides
                box[1] = exc
            done.set()
            del item, fn, box, done

    def close(self) -> None:
        if self._queue is not None and self._pid == os.getpid():
            self._queue.put(None)
        self._queue = None


@dataclass(frozen=True)
class Sample:
    """One sample: when (unix seconds), at which step, in which process, the flat values."""

    time_seconds: float
    step: int | None
    pid: int
    values: dict[str, Number]


def _new_sample(time_seconds: float, step: int | None, pid: int, values: dict[str, Number],
                _new: Callable[[type], Any] = object.__new__) -> Sample:
    """``Sample(...)`` without the frozen dataclass's ``__init__`` (half the cost)."""
    sample = _new(Sample)
    d = sample.__dict__
    d["time_seconds"] = time_seconds
    # Keep a copy made here: the caller's int (allocated at its loop line) kept in
    # history would read as a 32 B/sample leak there in tracemalloc's filtered bytes.
    d["step"] = step if step is None or -5 <= step <= 256 else (step + 1) - 1
    d["pid"] = pid
    d["values"] = values
    return sample  # type: ignore[no-any-return]


def _check_int(option: str, value: Any, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(option, f"must be an int >= {minimum}, got {show(value)}")
    if value > _INT_OPTION_MAX:
        raise ConfigError(option, f"must be at most {_INT_OPTION_MAX}, got {show(value)}")
    return value


#: The largest int option (a ring buffer's length must fit a C ssize_t).
_INT_OPTION_MAX = 2**62


def _check_seconds(option: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigError(option, f"must be a number of seconds >= 0, got {show(value)}")
    return _as_float(option, value)


def _as_float(option: str, value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:
        raise ConfigError(option, "is too large to be a number of seconds") from None


class _Slot:
    """A probe in a Prober, with its schedule, its cost and its failures."""

    __slots__ = (
        "consecutive_failures",
        "cost_seconds",
        "disabled",
        "errors_count",
        "every",
        "factory_name",
        "flattener",
        "interval_seconds",
        "last_call",
        "last_cost_seconds",
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
        self.time_limit: float | None = None
        self.max_keys = DEFAULT_MAX_KEYS
        self.timeouts_count = 0
        self.worker: _Worker | None = None
        self.name = name
        self.probe = probe
        self.every = every
        self.interval_seconds = interval_seconds
        self.last_call = -(10**18)
        self.last_time = float("-inf")
        self.cost_seconds = 0.0  # a moving average, for the budget
        self.last_cost_seconds = 0.0
        self.overhead_key = ""  # set by the Prober, which knows the prefix
        self.flattener: PlanRunner | None = None
        self.errors_count = 0
        self.consecutive_failures = 0
        self.disabled = False
        self.started = False
        self.warned = False


def _check_limit(option: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(option, f"must be a number of seconds > 0, got {show(value)}")
    if value == float("inf"):
        raise ConfigError(option, "must be finite; leave it out for no limit")
    return _as_float(option, value)


def _check_tags(tags: Any, sink: Any) -> dict[str, Any] | None:
    """``tags=``: a JSON-serializable mapping of str keys, for a path sink only."""
    if tags is None:
        return None
    if not isinstance(tags, Mapping):
        raise ConfigError("tags", f"must be a mapping, got {show(tags)}")
    if not isinstance(sink, (str, os.PathLike)):
        raise ConfigError("tags", "only apply when sink is a path (a JSONL file); "
                          f"got sink={sink!r}")
    import json

    for k, v in tags.items():
        if not isinstance(k, str):
            raise ConfigError("tags", f"keys must be str, got {show(k)}")
        if k in ("time", "step", "pid", "values"):
            raise ConfigError("tags", f"{k!r} is a field of every JSONL line; rename the tag")
        try:
            json.dumps(v, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"tags.{k}", f"cannot be written as JSON: {exc}") from None
    return dict(tags)


def _did_you_mean(name: str, known: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` with the closest of ``known`` to ``name``, or ``""``."""
    hint = did_you_mean(name, known)
    return f"; {hint}" if hint else ""


def _check_leak_options(options: Any) -> dict[str, Any]:
    """``leak_options=``: option names of :func:`memprobe.analyze_samples`."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigError("leak_options", f"must be a mapping, got {show(options)}")
    from ._verdicts import LEAK_OPTIONS as known

    for k in options:
        if k not in known:
            hint = _did_you_mean(str(k), sorted(known))
            raise ConfigError(f"leak_options.{k}", f"unknown option{hint} "
                              f"(options: {', '.join(sorted(known))})")
    return dict(options)


def _guard_options(
    name: str, opts: dict[str, Any], default_limit: float | None
) -> tuple[float | None, int, bool]:
    """Pop and check a probe's guard options: (time limit, max keys, isolate)."""
    limit = opts.pop("time_limit_seconds", default_limit)
    if limit is not None:
        limit = _check_limit(f"probes.{name}.time_limit_seconds", limit)
    max_keys = _check_int(f"probes.{name}.max_keys", opts.pop("max_keys", DEFAULT_MAX_KEYS), 1)
    isolate = opts.pop("isolate", False)
    if not isinstance(isolate, bool):
        raise ConfigError(f"probes.{name}.isolate", f"must be a bool, got {show(isolate)}")
    if isolate and limit is None:
        raise ConfigError(
            f"probes.{name}.isolate",
            "needs a time limit: give time_limit_seconds (for the probe or the Prober)",
        )
    return limit, max_keys, isolate


def parse_probes(
    probes: Iterable[str] | Mapping[str, Mapping[str, Any] | None] | None,
) -> dict[str, dict[str, Any]]:
    """Normalize ``probes=`` to ``{name: options}``; raises ConfigError on a bad shape."""
    if probes is None:
        return {name: {} for name in DEFAULT_PROBES}
    if isinstance(probes, str):
        raise ConfigError("probes", f"must be a list of names or a mapping, got the str {probes!r}")
    out: dict[str, dict[str, Any]] = {}
    if isinstance(probes, Mapping):
        for name, opts in probes.items():
            if not isinstance(name, str):
                raise ConfigError("probes", f"probe names must be str, got {show(name)}")
            if opts is None:
                opts = {}
            if not isinstance(opts, Mapping):
                raise ConfigError(f"probes.{name}", f"options must be a mapping, got {show(opts)}")
            for k in opts:
                if not isinstance(k, str):
                    raise ConfigError(f"probes.{name}", f"option names must be str, got {show(k)}")
            out[name] = dict(opts)
        return out
    try:
        names = list(probes)
    except TypeError:
        raise ConfigError(
            "probes", f"must be a list of names or a mapping, got {show(probes)}"
        ) from None
    for name in names:
        if not isinstance(name, str):
            raise ConfigError("probes", f"probe names must be str, got {show(name)}")
        if name in out:
            raise ConfigError("probes", f"probe {name!r} is named twice")
        out[name] = {}
    return out


def _bad_options(info: ProbeInfo, options: Mapping[str, Any], exc: TypeError) -> str:
    """What is wrong with the options a factory refused: unknown names, with suggestions."""
    import inspect

    try:
        params = inspect.signature(info.factory).parameters
    except (TypeError, ValueError):
        return f"bad options {dict(options)!r}: {exc}"
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return f"bad options {dict(options)!r}: {exc}"
    known = sorted([*params, *SCHEDULE_OPTIONS, *GUARD_OPTIONS])
    for name in options:
        if name not in params:
            hint = _did_you_mean(name, known)
            return f"unknown option {name!r}{hint} (options: {', '.join(known)})"
    return f"bad options {dict(options)!r}: {exc}"


def build_probe(info: ProbeInfo, options: Mapping[str, Any]) -> Any:
    """Call a probe's factory with its options, turning a bad option into ConfigError."""
    try:
        probe = info.factory(**options)
    except ConfigError:
        raise
    except TypeError as exc:
        raise ConfigError(f"probes.{info.name}", _bad_options(info, options, exc)) from exc
    except Exception as exc:
        raise ProbeError(
            info.name, f"the factory from plugin {info.plugin!r} raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    for method in ("start", "sample", "stop"):
        if not callable(getattr(probe, method, None)):
            raise ConfigError(
                f"probes.{info.name}",
                f"the probe from plugin {info.plugin!r} has no {method}() method",
            )
    return probe


class Prober:
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
        (e.g. ``0.01``); costly probes are spaced out to stay under it.
    :param history: how many samples ``history`` keeps (a ring buffer).
    :param max_failures: a probe that fails this many times in a row is disabled.
    :param sink: a path (a JSONL file; ``{pid}`` is replaced) or a :class:`Sink`.
    :param tags: extra fields for each JSONL line, e.g. ``{"env_runner": 1}``.
    :param prefix: the first component of every key.
    :param max_site_keys: distinct allocation-site / type keys ever emitted;
        the rest are summed into ``.../other``.
    :param load_entrypoints: load third-party probes from the ``memprobe`` entry points.
    :param plugin_manager: use this plugin manager instead of a new one.
    :param time_limit_seconds: the default per-probe time limit (``None``: none).
        A probe whose ``sample()`` takes longer has its values dropped, counted
        in ``memprobe/errors/<probe>`` and ``memprobe/timeouts/<probe>``.

    :param on_leak: the leak alarm: ``"warn"`` (a :class:`memprobe.LeakWarning`) or a
        callable given each newly leaking :class:`memprobe.Verdict`, once per metric.
    :param leak_check_every: with ``on_leak``, judge ``history`` every this many samples.
    :param leak_confirmations: alarm only when a metric is judged leaking at this many
        checks in a row (a transient, such as an allocator step after a plateau, rarely
        lasts two checks: docs/leaks.md has the false-alarm rates).
    :param leak_options: options of :func:`memprobe.analyze_samples` for the alarm.

    Every probe also takes the guard options ``time_limit_seconds``, ``max_keys``
    (most keys one sample may return, default 10,000; over it the sample is an
    error) and ``isolate`` (run the probe in a worker thread, so that a probe
    which hangs past its time limit is abandoned and disabled instead of
    blocking the caller; needs a time limit; costs a thread hand-off per sample).
    """

    def __init__(
        self,
        probes: Iterable[str] | Mapping[str, Mapping[str, Any] | None] | None = None,
        *,
        every: int = 1,
        interval_seconds: float = 0.0,
        budget: float | None = None,
        history: int = 1000,
        max_failures: int = 3,
        sink: str | os.PathLike[str] | Sink | None = None,
        tags: Mapping[str, Any] | None = None,
        prefix: str = "memprobe",
        max_site_keys: int = 100,
        load_entrypoints: bool = True,
        plugin_manager: pluggy.PluginManager | None = None,
        time_limit_seconds: float | None = None,
        on_leak: Callable[[Any], None] | str | None = None,
        leak_check_every: int = 50,
        leak_confirmations: int = 2,
        leak_options: Mapping[str, Any] | None = None,
    ) -> None:
        if time_limit_seconds is not None:
            time_limit_seconds = _check_limit("time_limit_seconds", time_limit_seconds)
        self.every = _check_int("every", every, 1)
        self.interval_seconds = _check_seconds("interval_seconds", interval_seconds)
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= 1
        ):
            raise ConfigError("budget", f"must be a fraction in (0, 1], got {show(budget)}")
        self.budget = None if budget is None else float(budget)
        _check_int("history", history, 1)
        self.max_failures = _check_int("max_failures", max_failures, 1)
        _check_int("max_site_keys", max_site_keys, 0)
        if not isinstance(prefix, str):
            raise ConfigError("prefix", f"must be a str, got {show(prefix)}")
        self.prefix = prefix
        if not isinstance(load_entrypoints, bool):
            raise ConfigError("load_entrypoints", f"must be a bool, got {show(load_entrypoints)}")
        if plugin_manager is not None and not isinstance(plugin_manager, pluggy.PluginManager):
            raise ConfigError(
                "plugin_manager", f"must be a pluggy.PluginManager, got {show(plugin_manager)}"
            )
        tags = _check_tags(tags, sink)
        self._pm = plugin_manager or get_plugin_manager(load_entrypoints=load_entrypoints)
        self.registry = collect_probes(self._pm)
        spec = parse_probes(probes)
        self._slots: list[_Slot] = []
        for name, opts in spec.items():
            info = self.registry.get(name)
            if info is None:
                raise unknown_probe_error(name, self.registry)
            opts = dict(opts)
            p_every = _check_int(f"probes.{name}.every", opts.pop("every", self.every), 1)
            p_interval = _check_seconds(
                f"probes.{name}.interval_seconds",
                opts.pop("interval_seconds", self.interval_seconds),
            )
            guard = _guard_options(name, opts, time_limit_seconds)
            slot = _Slot(name, build_probe(info, opts), p_every, p_interval)
            slot.time_limit, slot.max_keys, isolate = guard
            if isolate:
                slot.worker = _Worker(name)
            self._slots.append(slot)
        if sink is None or hasattr(sink, "write"):
            self.sink: Sink | None = sink  # type: ignore[assignment]
        elif isinstance(sink, (str, os.PathLike)):
            self.sink = JsonlSink(sink, tags=tags)
        else:
            raise ConfigError("sink", f"must be a path or an object with write(), got {show(sink)}")
        self.history: deque[Sample] = deque(maxlen=history)
        self.key_cap = KeyCap(max_site_keys)
        self._lock = threading.RLock()
        self._calls = 0
        _LIVE_PROBERS.add(self)
        self._started = False
        self._t_start = 0.0
        self._probe_seconds_total = 0.0
        self._prefix_s = sanitize_key(prefix) + "/" if prefix else ""
        for slot in self._slots:  # the key of each probe's overhead metric, made once
            slot.overhead_key = f"{self._prefix_s}overhead/{slot.name}_seconds"
        self._key_sample_seconds = f"{self._prefix_s}overhead/sample_seconds"
        self._key_fraction = f"{self._prefix_s}overhead/fraction"
        self._hook_errors: dict[str, int] = {}
        self._any_errors = False  # a probe or a hook has failed: sample() adds errors/...
        self._derive_hooks = False
        self._end_hooks = False
        # Leak alarm (memprobe.leaks): "warn" issues a LeakWarning, a callable
        # gets each new leaking Verdict; checked every leak_check_every samples.
        if on_leak is not None and on_leak != "warn" and not callable(on_leak):
            raise ConfigError("on_leak", f"must be a callable or 'warn', got {show(on_leak)}")
        self._on_leak = on_leak
        self._leak_every = _check_int("leak_check_every", leak_check_every, 1)
        self._leak_confirm = _check_int("leak_confirmations", leak_confirmations, 1)
        self._leak_streak: dict[str, int] = {}  # consecutive checks each metric leaked
        self._leak_options = _check_leak_options(leak_options)
        self._leak_alarmed: set[str] = set()
        self._leak_samples = 0

    # -- names ----------------------------------------------------------------
    @property
    def probe_names(self) -> list[str]:
        """The names of this Prober's probes, in order."""
        return [s.name for s in self._slots]

    def probe(self, name: str) -> Any:
        """The probe object named ``name``."""
        for s in self._slots:
            if s.name == name:
                return s.probe
        raise unknown_probe_error(name, self.probe_names)

    # -- lifecycle --------------------------------------------------------------
    def start(self) -> Prober:
        """Start every probe (a probe that fails to start is counted and disabled)."""
        with self._lock:
            if self._started:
                return self
            self._started = True
            self._t_start = time.perf_counter()
            self._derive_hooks = bool(self._pm.hook.memprobe_sample_flattened.get_hookimpls())
            self._end_hooks = bool(self._pm.hook.memprobe_sample_end.get_hookimpls())
            for slot in self._slots:
                self._start_slot(slot)
        return self

    def _isolated_sample(self, slot: _Slot) -> Any:
        worker, limit = slot.worker, slot.time_limit
        assert worker is not None and limit is not None
        if not slot.started:
            worker.call(slot.probe.start, limit)
            slot.started = True
        return worker.call(slot.probe.sample, limit)

    def _stop_isolated(self, slot: _Slot) -> None:
        worker, limit = slot.worker, slot.time_limit
        assert worker is not None and limit is not None
        if slot.started and not worker.abandoned:  # an abandoned probe may still be running
            try:
                worker.call(slot.probe.stop, limit)
            except Exception as exc:
                self._fail(slot, exc, "stop")
        slot.started = False
        worker.close()

    def _start_slot(self, slot: _Slot) -> None:
        if slot.worker is not None:  # started lazily, in its thread, at the first sample
            return
        try:
            slot.probe.start()
            slot.started = True
        except Exception as exc:
            self._fail(slot, exc, "start", fatal=True)

    def stop(self) -> None:
        """Stop every probe and close the sink. Safe to call twice."""
        with self._lock:
            if not self._started:
                return
            self._started = False
            for slot in self._slots:
                if slot.worker is not None:
                    self._stop_isolated(slot)
                elif slot.started:
                    slot.started = False
                    try:
                        slot.probe.stop()
                    except Exception as exc:
                        self._fail(slot, exc, "stop")
            if self.sink is not None:
                try:
                    self.sink.close()
                except Exception as exc:  # a user's sink
                    warnings.warn(f"memprobe: closing the sink failed: {exc!r}",
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

    # -- failures ---------------------------------------------------------------
    def _fail(self, slot: _Slot, exc: BaseException, where: str, fatal: bool = False) -> None:
        slot.errors_count += 1
        self._any_errors = True
        slot.consecutive_failures += 1
        disable = fatal or slot.consecutive_failures >= self.max_failures
        if disable:
            slot.disabled = True
        if not slot.warned or disable:
            slot.warned = True
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            then = (
                "it is disabled" if disable
                else f"it is disabled after {self.max_failures} failures in a row"
            )
            warnings.warn(
                f"memprobe probe {slot.name!r} failed in {where}(): {type(exc).__name__}: {exc}; "
                f"counted in {self._prefix_s}errors/{slot.name}, {then}.\n{tb}",
                ProbeFailedWarning,
                stacklevel=4,
            )

    # -- sampling ---------------------------------------------------------------
    def _due_by_time(self, slot: _Slot, now: float) -> bool:
        """The time part of a slot's schedule: its interval and its share of the budget.

        ``sample()`` checks ``disabled`` and ``every`` first, and calls this only
        when the slot has an interval or the Prober a budget.
        """
        since = now - slot.last_time
        if since < slot.interval_seconds:
            return False
        if self.budget is not None and slot.cost_seconds:
            share = self.budget / len(self._slots)
            if since < slot.cost_seconds / share:
                return False
        return True

    def sample(self, step: int | None = None, *, force: bool = False) -> dict[str, Number]:
        """Run the probes that are due and return this sample's flat values.

        :param step: the caller's step (iteration, episode); stored with the sample.
        :param force: run every enabled probe, due or not.
        :returns: ``{"memprobe/<probe>/<metric>": number}`` for the probes that
            ran, plus ``memprobe/errors/<probe>`` for probes that have failed and
            ``memprobe/overhead/...``. Empty when no probe was due.

        Never raises because of a probe: a failing probe is counted, warned
        about once and disabled after ``max_failures`` failures in a row.
        """
        with self._lock:
            if not self._started:
                self.start()
            t0 = _perf_counter()
            calls = self._calls = self._calls + 1
            timed = self.budget is not None  # else only a slot's interval needs the clock
            results: dict[str, Any] = {}
            ran: list[_Slot] = []
            spent = 0.0
            for slot in self._slots:
                if slot.disabled:
                    continue
                if not force and (
                    calls - slot.last_call < slot.every
                    or ((timed or slot.interval_seconds) and not self._due_by_time(slot, t0))
                ):
                    continue
                t1 = _perf_counter()
                try:
                    if slot.worker is None:
                        if not slot.started:
                            slot.probe.start()
                            slot.started = True
                        res = slot.probe.sample()
                    else:
                        res = self._isolated_sample(slot)
                    if type(res) is not dict and not isinstance(res, Mapping):
                        raise MetricValueError(
                            slot.name, f"sample() returned {type(res).__name__}, not a mapping"
                        )
                    if len(res) > slot.max_keys:
                        raise MetricValueError(
                            slot.name, f"sample() returned {len(res)} keys, over max_keys="
                            f"{slot.max_keys}; the sample is dropped",
                        )
                    data = {slot.name: res}
                    run = slot.flattener  # the compiled flatten of this probe's usual shape
                    flat = None if run is None else run(data)
                    if flat is None:
                        flat = flatten(data, prefix=self.prefix, key_cap=self.key_cap,
                                       max_keys=slot.max_keys)
                        slot.flattener = compiled_flattener((slot.name,), self.prefix)
                    if len(flat) > slot.max_keys:
                        raise MetricValueError(
                            slot.name, f"sample() flattened to {len(flat)} keys, over max_keys="
                            f"{slot.max_keys}; the sample is dropped",
                        )
                except (Exception, SystemExit) as exc:  # a plugin's sys.exit() must not end the job
                    if slot.worker is not None and slot.worker.abandoned:
                        slot.timeouts_count += 1
                        self._fail(slot, exc, "sample", fatal=True)
                    else:
                        self._fail(slot, exc, "sample")
                    flat = None
                t2 = _perf_counter()
                cost = t2 - t1
                if flat is not None and slot.time_limit is not None and cost > slot.time_limit:
                    slot.timeouts_count += 1
                    flat = None
                    self._fail(slot, ProbeError(
                        slot.name, f"sample() took {cost:.3g} s, over its time limit of "
                        f"{slot.time_limit:g} s; its values are dropped"), "sample")
                avg = slot.cost_seconds
                slot.cost_seconds = 0.8 * avg + 0.2 * cost if avg else cost
                slot.last_cost_seconds = cost
                slot.last_call = calls
                slot.last_time = t2
                spent += cost
                if flat is not None:
                    slot.consecutive_failures = 0
                    if results:
                        results.update(flat)
                    else:  # flatten returns a new dict: the first one is the result
                        results = flat
                    ran.append(slot)
            self._probe_seconds_total += spent
            if not ran and not force:
                return {}
            values = results
            p = self._prefix_s
            if self._any_errors:
                for slot in self._slots:
                    if slot.errors_count:
                        values[f"{p}errors/{slot.name}"] = slot.errors_count
                        if slot.timeouts_count:
                            values[f"{p}timeouts/{slot.name}"] = slot.timeouts_count
                for name, n in self._hook_errors.items():
                    values[f"{p}errors/{name}"] = n
            for slot in ran:
                values[slot.overhead_key] = slot.last_cost_seconds
            if self._derive_hooks:
                self._derive(values)
            t3 = _perf_counter()
            wall = t3 - self._t_start
            values[self._key_sample_seconds] = t3 - t0
            values[self._key_fraction] = (
                self._probe_seconds_total / wall if wall > 0 else 0.0
            )
            sample = _new_sample(_time(), step, current_pid(), values)
            self.history.append(sample)
            if self.sink is not None:
                try:
                    self.sink.write(sample)
                except Exception as exc:  # a user's sink; JsonlSink reports its own errors
                    self._hook_failed("sink", "write", exc)
            if self._end_hooks:
                self._end(sample)
            if self._on_leak is not None:
                self._leak_samples += 1
                if self._leak_samples % self._leak_every == 0:
                    self._check_leaks()
            return values

    def _check_leaks(self) -> None:
        """The leak alarm: never raises into the caller's loop."""
        try:
            from ._errors import LeakWarning

            report = self.report(**self._leak_options)
            leaks = report.leaks
            streak = self._leak_streak
            self._leak_streak = {v.key: streak.get(v.key, 0) + 1 for v in leaks}
            for v in leaks:
                if v.key in self._leak_alarmed or self._leak_streak[v.key] < self._leak_confirm:
                    continue
                self._leak_alarmed.add(v.key)
                if callable(self._on_leak):
                    self._on_leak(v)
                else:  # "warn"
                    warnings.warn(f"memprobe: leak: {v.describe()}", LeakWarning, stacklevel=4)
        except Warning:
            raise  # warnings turned into errors by the user's filters are theirs
        except Exception as exc:
            self._hook_failed("leak_alarm", "on_leak", exc)

    def _hook_failed(self, plugin: str, hook: str, exc: BaseException) -> None:
        first = plugin not in self._hook_errors
        self._hook_errors[plugin] = self._hook_errors.get(plugin, 0) + 1
        self._any_errors = True
        if first:
            warnings.warn(
                f"memprobe plugin {plugin!r} failed in {hook}: {type(exc).__name__}: {exc}; "
                f"counted in {self._prefix_s}errors/{plugin}",
                ProbeFailedWarning,
                stacklevel=4,
            )

    def _derive(self, values: dict[str, Number]) -> None:
        for impl in self._pm.hook.memprobe_sample_flattened.get_hookimpls():
            try:
                extra = impl.function(values=dict(values), prober=self)
                if extra is None:
                    continue
                if not isinstance(extra, Mapping):
                    raise MetricValueError(impl.plugin_name, "returned a non-mapping")
                checked = {}
                for k, v in extra.items():
                    if not isinstance(k, str):
                        raise MetricValueError(repr(k), "derived metric key is not a str")
                    if k in values:
                        raise MetricValueError(k, "derived metric would overwrite a probe's metric")
                    checked[k] = _check_number(k, v)
                values.update(checked)
            except Exception as exc:
                self._hook_failed(impl.plugin_name, "memprobe_sample_flattened", exc)

    def _end(self, sample: Sample) -> None:
        for impl in self._pm.hook.memprobe_sample_end.get_hookimpls():
            try:
                impl.function(sample=sample, prober=self)
            except Exception as exc:
                self._hook_failed(impl.plugin_name, "memprobe_sample_end", exc)

    # -- reading back -----------------------------------------------------------
    def report(self, **options: Any) -> Any:
        """Leak verdicts on this Prober's ``history``: a :class:`memprobe.leaks.Report`.

        Options go to :func:`memprobe.leaks.analyze_samples` (``thresholds``,
        ``warmup``, ``min_points``...).
        """
        from ._verdicts import analyze_samples

        with self._lock:
            samples = list(self.history)
        options.setdefault("prefix", self.prefix)
        return analyze_samples(samples, **options)

    def series(self, key: str) -> tuple[list[float], list[float]]:
        """``(x, y)`` for one metric over ``history``; x is the step, or the sample index."""
        xs: list[float] = []
        ys: list[float] = []
        with self._lock:
            for i, s in enumerate(self.history):
                v = s.values.get(key)
                if v is not None:
                    xs.append(float(s.step if s.step is not None else i))
                    ys.append(float(v))
        return xs, ys

    @property
    def latest(self) -> dict[str, Number]:
        """The most recent value of every metric in ``history``."""
        out: dict[str, Number] = {}
        with self._lock:
            for s in self.history:
                out.update(s.values)
        return out


class Watch:
    """Iterates over ``iterable`` and samples after each item: ``memprobe.watch``."""

    def __init__(self, iterable: Iterable[Any], prober: Prober) -> None:
        self._iterable = iterable
        self.prober = prober

    def __iter__(self) -> Any:
        with self.prober:
            for i, item in enumerate(self._iterable):
                yield item
                self.prober.sample(step=i)


def watch(
    iterable: Iterable[Any],
    probes: Sequence[str] | Mapping[str, Mapping[str, Any] | None] | None = None,
    *,
    every: int = 1,
    **options: Any,
) -> Watch:
    """Wrap an iterable so probes sample after every ``every`` items.

    ``for batch in memprobe.watch(loader, probes=["process"], every=10): ...``;
    the Prober is ``.prober`` of the returned object (its ``history`` holds
    the samples). Other keyword options go to :class:`Prober`.
    """
    import inspect

    known = [n for n in inspect.signature(Prober).parameters if n != "probes"]
    for name in options:
        if name not in known:
            raise ConfigError(name, f"unknown option of memprobe.watch{_did_you_mean(name, known)}")
    return Watch(iterable, Prober(probes, every=every, **options))
