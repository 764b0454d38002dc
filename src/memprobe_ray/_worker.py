"""Probing Ray workers with no change to the user's code: a background sampler per process.

``ray.init(runtime_env={"worker_process_setup_hook": "memprobe_ray.setup"})``
runs :func:`setup` in every worker process of the job. It starts one daemon
thread that samples the process every ``interval_seconds`` into a
:class:`~memprobe_ray.RayMetricsSink`. The Prober's own leak alarm judges the
history every ``leak_check_every`` samples and confirms a leak at
``leak_confirmations`` leaking checks in a row (then opens its deep capture to
name the culprit); the sink exports the alarm's state after each check: a
process is a suspect once the alarm has confirmed a leak, for the rest of its life.

The thread names the process by what it runs, read from the process title Ray
sets (``ray::<Class>.<method>`` in an actor, ``ray::<task>`` in a task worker):
the actor class, kept once known, or the task name. Ray reuses a task worker
for other tasks, so a task worker's name follows the task it runs now (and
stays while it idles). A process that has run nothing yet (``ray::IDLE``, Ray's
pool of spare workers) or an actor still in its constructor exports nothing yet.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import memprobe

from ._sink import RayMetricsSink
from .logs import session_jsonl_dir

F = TypeVar("F")

#: Sampler options and their defaults (:func:`setup_hook`, :func:`probed`).
DEFAULTS: Mapping[str, Any] = {
    "probes": ("process", "gc"),
    "interval_seconds": 5.0,
    "leak_check_every": 12,
    "leak_confirmations": 2,
    "capture_on_leak": True,
    "history": 360,
    "max_sites": 5,
    "leak_options": None,
    "jsonl": True,
}
#: The longest a sampler leaves its gauges unrecorded (Ray's default report interval
#: is 10 s, and its agent drops a gauge not recorded for two of them).
REFRESH_SECONDS = 5.0
#: A sampler that fails this many times in a row stops (with a MemprobeWarning).
MAX_FAILURES = 3
#: Environment variable for the sampling interval of :func:`setup` (seconds).
INTERVAL_ENV = "MEMPROBE_RAY_INTERVAL_SECONDS"
#: Environment variable that turns the setup hook off in a worker (``"off"``): set in an
#: actor's or task's ``runtime_env={"env_vars": ...}``, its processes are left to
#: :func:`probed` (and its options) or not probed at all.
HOOK_ENV = "MEMPROBE_RAY_SETUP_HOOK"


#: The values :data:`HOOK_ENV` takes: off, or on (the default).
_HOOK_OFF = ("off", "0", "false", "no")
_HOOK_ON = ("", "on", "1", "true", "yes")
#: The range of :data:`INTERVAL_ENV`, in seconds.
ENV_INTERVAL_RANGE_SECONDS = (0.001, 86400.0)


def _hook_off() -> bool:
    """Whether :data:`HOOK_ENV` turns the hook off; a value that is neither on nor off is
    a :class:`memprobe.ConfigError` naming the variable."""
    value = os.environ.get(HOOK_ENV, "")
    word = value.strip().lower()
    if word not in _HOOK_OFF + _HOOK_ON:
        raise memprobe.ConfigError(HOOK_ENV, f"must be 'off' or 'on', got {value!r}")
    return word in _HOOK_OFF


def _env_interval() -> float:
    """:data:`INTERVAL_ENV` in seconds (the default when unset), checked like an option."""
    value = os.environ.get(INTERVAL_ENV)
    if value is None or not value.strip():
        return float(DEFAULTS["interval_seconds"])
    low, high = ENV_INTERVAL_RANGE_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not low <= seconds <= high:
        raise memprobe.ConfigError(INTERVAL_ENV, f"must be a number of seconds from {low:g} "
                                   f"to {high:g}, got {value[:100]!r}")
    return seconds


_LOG = logging.getLogger("memprobe_ray")
_LOCK = threading.Lock()
_SAMPLER: _Sampler | None = None


def _role_of(cls_name: str) -> str:
    if "EnvRunner" in cls_name:
        return "env_runner"
    if "Learner" in cls_name:
        return "learner"
    return "actor"


# Ray's private API, read in these two functions only (checked on Ray 2.60): the
# process title names what a worker runs; the worker's actor instance holds RLlib's
# worker_index. Either one missing gives no identity, never an error.
def _proc_title() -> str:
    """The worker's process title (``ray::SingleAgentEnvRunner.sample``)."""
    import ray

    try:
        return str(ray._raylet.getproctitle())
    except Exception:
        return ""


def _actor_instance() -> Any:
    """The actor instance this worker process holds, or None."""
    import ray

    try:
        for instance in ray._private.worker.global_worker.actors.values():
            return instance
    except Exception:
        pass
    return None


def ray_identity() -> tuple[str, str, str] | None:
    """``(role, name, index)`` of this Ray worker from what it runs, ``None`` while idle.

    An actor: role ``env_runner``/``learner``/``actor``, its class, and its
    ``worker_index`` (RLlib's EnvRunners and Learners) or the name it was given.
    A task worker: role ``task`` and the task's function name.
    """
    import ray

    if not ray.is_initialized():
        return None
    title = _proc_title()
    if not title.startswith("ray::"):
        return None
    running = title[len("ray::"):].split("(", 1)[0].strip()
    if not running or running == "IDLE":
        return None
    ctx = ray.get_runtime_context()
    actor_id = ctx.get_actor_id()
    if actor_id is None:
        return ("task", running, "")
    cls_name, _, method = running.partition(".")
    if method == "__init__":
        return None  # its attributes (worker_index) are not set yet
    index = getattr(_actor_instance(), "worker_index", "")
    if index in ("", None):
        index = ctx.get_actor_name() or ""
    return (_role_of(cls_name), cls_name, str(index))


class Tee:
    """A sink that writes each sample to several sinks, in order."""

    def __init__(self, *sinks: Any) -> None:
        self.sinks = sinks

    def write(self, sample: Any) -> None:
        for sink in self.sinks:
            sink.write(sample)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


class _Sampler(threading.Thread):
    """Samples this process until the process ends (a daemon thread)."""

    def __init__(self, options: Mapping[str, Any],
                 identity: Callable[[], tuple[str, str, str] | None]) -> None:
        super().__init__(name="memprobe-ray-sampler", daemon=True)
        self.options = {**DEFAULTS, **options}
        self.identity = identity
        self.stopped = threading.Event()
        self.prober: memprobe.Prober | None = None
        self.sink: RayMetricsSink | None = None
        self.failures = 0
        self.samples = 0
        self._exported: Any = None  # the alarm's report last exported

    def _build(self, role: str, name: str, index: str) -> None:
        o = self.options
        self.sink = RayMetricsSink(role=role, name=name, index=index, max_sites=o["max_sites"])
        sink: Any = self.sink
        path = o["jsonl"]
        if path is True:  # the default: where Ray serves it (memprobe report --ray)
            where = session_jsonl_dir()
            path = os.path.join(where, "memprobe-{pid}.jsonl") if where else None
        if path:
            jsonl = memprobe.JsonlSink(path, tags={**self.sink.tags})
            sink = Tee(self.sink, jsonl)
        self.prober = memprobe.Prober(
            o["probes"], history=o["history"], sink=sink, on_leak=self._on_leak,
            leak_check_every=o["leak_check_every"], leak_confirmations=o["leak_confirmations"],
            leak_options=o["leak_options"], capture_on_leak=o["capture_on_leak"])
        self.sink.bind(self.prober)
        self.prober.start()

    def _on_leak(self, verdict: Any) -> None:
        """The alarm confirmed a leak: one line in the worker's log (the sink exports it)."""
        tags = self.sink.tags if self.sink is not None else {}
        _LOG.warning("memprobe_ray: %s %s %s leaks: %s", tags.get("role", ""),
                     tags.get("name", ""), tags.get("index", ""), verdict.describe())

    def _follow_task(self) -> None:
        """Name a pooled task worker by the task it runs now (its tags, and its JSONL tags)."""
        who = self.identity()
        if who is None or who[0] != "task" or who[1] == self.sink.tags["name"]:  # type: ignore[union-attr]
            return
        self.sink.retag(name=who[1])  # type: ignore[union-attr]
        jsonl = getattr(self.prober, "sink", None)
        for sink in getattr(jsonl, "sinks", ()):
            if isinstance(sink, memprobe.JsonlSink):
                sink.tags["name"] = who[1]

    def step(self) -> None:
        """One sample (and, when due, one leak verdict); never raises."""
        try:
            if self.prober is None:
                who = self.identity()
                if who is None:
                    return
                self._build(*who)
            assert self.prober is not None and self.sink is not None
            if self.sink.tags["role"] == "task":
                self._follow_task()
            if not self.prober.sample():
                return
            self.samples += 1
            alarm = self.prober.alarm
            if alarm is not None and alarm.latest is not self._exported:
                self._exported = alarm.latest  # a check, or a capture that named culprits
                self.sink.write_alarm(alarm)
            self.failures = 0
        except Exception as exc:  # a memory probe never breaks the worker it watches
            self.failures += 1
            if self.failures >= MAX_FAILURES:
                self.stopped.set()
                try:  # to the worker's log; never raised into the worker
                    warnings.warn(
                        f"memprobe_ray: the sampler of process {os.getpid()} stopped after "
                        f"{MAX_FAILURES} failures in a row; the last: {type(exc).__name__}: {exc}",
                        memprobe.MemprobeWarning, stacklevel=2)
                except Exception:
                    pass

    def run(self) -> None:
        interval = self.options["interval_seconds"]
        next_sample = time.monotonic()
        # Until the process is named, look every 0.1 s: a short task must not slip by.
        # Then wake at least every REFRESH_SECONDS: Ray drops a gauge left unset for
        # two report intervals, so between samples the sink records its gauges again.
        while not self.stopped.wait(
            min(interval, REFRESH_SECONDS) if self.prober is not None else min(interval, 0.1)
        ):
            if time.monotonic() >= next_sample or self.prober is None:
                next_sample = time.monotonic() + interval
                self.step()
            elif self.sink is not None:
                try:
                    self.sink.refresh()
                except Exception:  # a memory probe never breaks the worker it watches
                    self.failures += 1
        if self.prober is not None:
            self.prober.stop()
            self.prober.sink.close()  # type: ignore[union-attr]


def start_sampler(**options: Any) -> bool:
    """Start this process's sampler thread (once per process); ``False`` if already running.

    :param options: any of :data:`DEFAULTS` (``probes``, ``interval_seconds``,
        ``history``, ``max_sites``; the leak alarm's ``leak_check_every``,
        ``leak_confirmations``, ``capture_on_leak`` and ``leak_options`` for
        :func:`memprobe.analyze_samples` such as ``thresholds``, as
        :class:`memprobe.Prober` takes them; ``jsonl``: a JSONL file per process
        as well, its lines tagged ``role``, ``name``, ``index``, ``node``; ``True``
        (the default) for ``<session logs>/memprobe/<node id>/memprobe-<pid>.jsonl``,
        which ``memprobe report --ray`` reads from every node, a path with ``{pid}``
        on each node, or ``None`` for none), and ``identity``, a
        callable returning ``(role, name, index)`` or ``None`` while not yet known.
    :raises memprobe_ray.RayMetricsUnavailable: ray[default] is not installed.
    """
    global _SAMPLER
    from ._sink import require_ray_metrics

    require_ray_metrics()
    identity = options.pop("identity", ray_identity)
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise TypeError(f"unknown sampler option(s) {unknown}; options are {sorted(DEFAULTS)}")
    with _LOCK:
        if _SAMPLER is not None and _SAMPLER.is_alive() and _SAMPLER.pid == os.getpid():
            return False
        _SAMPLER = _Sampler(options, identity)
        _SAMPLER.pid = os.getpid()  # type: ignore[attr-defined]
        _SAMPLER.start()
        return True


def stop_sampler() -> None:
    """Stop this process's sampler thread, if any (it takes its last sample no more)."""
    global _SAMPLER
    with _LOCK:
        s, _SAMPLER = _SAMPLER, None
    if s is not None:
        s.stopped.set()
        if s is not threading.current_thread():
            s.join(timeout=5)


def setup() -> None:
    """The worker setup hook: ``runtime_env={"worker_process_setup_hook": "memprobe_ray.setup"}``.

    Samples every :data:`INTERVAL_ENV` seconds (default 5), set through
    ``runtime_env={"env_vars": {...}}``; use :func:`setup_hook` for other options.
    Does nothing in a worker whose :data:`HOOK_ENV` is ``"off"`` (either hook).
    """
    if _hook_off():
        return
    start_sampler(interval_seconds=_env_interval())


def setup_hook(**options: Any) -> Callable[[], None]:
    """A worker setup hook with these sampler options (see :func:`start_sampler`).

    ```pycon
    >>> hook = setup_hook(interval_seconds=1.0)
    >>> callable(hook)
    True

    ```
    """
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise TypeError(f"unknown sampler option(s) {unknown}; options are {sorted(DEFAULTS)}")
    return _SetupHook(options)


class _SetupHook:
    """A picklable setup hook with options; Ray names it by ``__name__`` when exporting it."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)
        self.__name__ = "memprobe_ray.setup_hook"

    def __call__(self) -> None:
        if not _hook_off():
            start_sampler(**self.options)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"memprobe_ray.setup_hook({args})"


def probed(target: F | None = None, **options: Any) -> Any:
    """Probe the processes of one actor class or one task, without the setup hook.

    Put it under ``@ray.remote``::

        @ray.remote
        @memprobe_ray.probed(interval_seconds=2)
        class Replay: ...

    On a class, the sampler starts when an instance is created; on a function,
    when the task first runs in a process. The process is tagged with the actor
    class or the task name, as the setup hook tags it. One sampler per process,
    whatever starts it: where the setup hook also runs, its sampler (started
    first) is the one, unless the actor's or task's ``runtime_env`` sets
    :data:`HOOK_ENV` to ``"off"``. Options as :func:`start_sampler`.
    """
    if target is None:
        return functools.partial(probed, **options)
    if isinstance(target, type):
        init = target.__init__

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            start_sampler(**options)

        target.__init__ = __init__  # type: ignore[misc]
        return target
    fn: Callable[..., Any] = target  # type: ignore[assignment]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start_sampler(**options)
        return fn(*args, **kwargs)

    return wrapper
