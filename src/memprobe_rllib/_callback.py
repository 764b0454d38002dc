"""MemoryProbeCallback: memprobe's Prober inside RLlib EnvRunners, Learners and the driver."""

from __future__ import annotations

import importlib
import os
import threading
import weakref
from collections.abc import Iterable
from typing import Any, ClassVar

from ray.rllib.callbacks.callbacks import RLlibCallback

import memprobe
from memprobe import ConfigError
from memprobe import keys as mkeys

from ._leak import JUDGED, LeakState
from ._options import TRIGGERS, CallbackOptions
from ._results import KeyKinds, ResultLog, declared, no_forecast_as_minus_one, warn

__all__ = [
    "TRIGGERS",
    "CallbackOptions",
    "MemoryProbeCallback",
    "episode_end_callback",
    "jsonl_path",
    "sample_end_callback",
    "train_result_callback",
]

#: What one sample is, per process role and trigger (for the warning and the docs).
STEP_NAMES = {
    "episode": "a sample at each episode end",
    "sample": "a sample per EnvRunner.sample() call",
    "driver": "a sample per train() iteration",
    "learner": "a sample per train() iteration",
}


def _plugin_manager(plugins: Iterable[str], load_entrypoints: bool) -> Any:
    pm = memprobe.get_plugin_manager(load_entrypoints=load_entrypoints)
    for mod in plugins:
        if pm.get_plugin(mod) is not None:
            continue
        try:
            module = importlib.import_module(mod)
        except Exception as exc:
            raise ConfigError("plugins", f"cannot import plugin module {mod!r}: {exc}") from exc
        pm.register(module, name=mod)
    return pm


def _jsonl_template(jsonl: str | bool | None) -> str | None:
    """The path option's template; ``True``: this node's session log directory (``None``
    where that is unknown, outside a connected Ray process: then no JSONL)."""
    if jsonl is None or jsonl is False:
        return None
    if jsonl is True:
        try:
            from memprobe_ray import session_jsonl_dir
        except ImportError:
            return None
        return session_jsonl_dir()
    return jsonl


def _node_id() -> str:
    """The Ray node id of this process, ``""`` outside Ray."""
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else ""
    except Exception:
        return ""


def jsonl_path(template: str, role: str, index: int | str) -> str:
    """The JSONL path for one process. ``template`` ending in ``.jsonl`` is a file
    template (``{role}``, ``{index}``, ``{pid}`` are replaced); anything else is a
    directory that gets ``memprobe-{role}-{index}-{pid}.jsonl``."""
    if not template.endswith(".jsonl"):
        template = os.path.join(template, "memprobe-{role}-{index}-{pid}.jsonl")
    return template.replace("{role}", role).replace("{index}", str(index))


#: The phase label of evaluation: the driver's span around ``evaluate()``, and every
#: sample of an evaluation EnvRunner.
EVALUATE = "evaluate"
#: The phase label the driver's Prober is in from ``on_algorithm_init`` on.
TRAIN = "train"


def _ray_sink(prober: memprobe.Prober) -> Any:
    """The prober's :class:`memprobe_ray.RayMetricsSink`, bound to it, or None."""
    from memprobe_ray import RayMetricsSink

    sink = next((s for s in prober.sinks if isinstance(s, RayMetricsSink)), None)
    return None if sink is None else sink.bind(prober)


def ray_metrics_plugin(pm: Any) -> None:
    """Register memprobe_ray's sink plugin in ``pm`` (entry points may be off or absent).

    :raises ConfigError: naming ``pip install "memprobe[ray]"`` when Ray's metrics
        cannot export here.
    """
    try:
        import memprobe_ray
        import memprobe_ray.plugin as plugin

        memprobe_ray.require_ray_metrics()
    except ImportError as exc:
        raise ConfigError("ray_metrics", str(exc) if "memprobe[ray]" in str(exc) else
                          f'needs memprobe_ray: pip install "memprobe[ray]" ({exc})') from None
    if not pm.is_registered(plugin) and pm.get_plugin("ray_metrics") is None:
        pm.register(plugin, name="memprobe_ray.plugin")


class ProcessProber:
    """One process's Prober with its leak alarm's state and its result log, built together.

    With ``options.ray_metrics`` (and ``sink``), the Prober also writes to the
    ``ray_metrics`` sink (tags ``role``, ``name="rllib"`` or ``"rllib_evaluate"``
    for an evaluation EnvRunner, ``index``), which gets the leak keys' verdict
    (:class:`LeakState`'s) after each check of the alarm. ``phase`` labels every
    sample (an evaluation EnvRunner's).
    """

    def __init__(self, options: CallbackOptions, role: str, index: int, *,
                 prefix: str, step_name: str, sink: bool = True,
                 phase: str | None = None) -> None:
        tag_index = None if role == "driver" else index
        self.leak = LeakState(prefix, role, tag_index, step_name)
        path = None
        where = _jsonl_template(options.jsonl) if sink else None
        if where is not None:
            tags: dict[str, Any] = {"role": role}
            if role != "driver":
                tags[role] = index
            node = _node_id()
            if node:
                tags["node"] = node
            path = memprobe.JsonlSink(jsonl_path(where, role, index), tags=tags)
        alarm: dict[str, Any] = {}
        if options.leak_check_every is not None:
            alarm = {"on_leak": self.leak.on_leak, "leak_check_every": options.leak_check_every,
                     "leak_confirmations": options.leak_confirmations,
                     "leak_options": options.alarm_options}
        pm = _plugin_manager(options.plugins, options.load_entrypoints)
        sinks: dict[str, Any] = {}
        if sink and options.ray_metrics:
            ray_metrics_plugin(pm)
            sinks["ray_metrics"] = {"role": role, "index": index,
                                    "name": "rllib" if phase is None else f"rllib_{phase}"}
        self.prober = memprobe.Prober(
            options.probe_spec, every=options.every, interval_seconds=options.interval_seconds,
            budget=options.prober_budget, history=options.history,
            max_failures=options.max_failures, sink=path, sinks=sinks or None,
            prefix=prefix, max_site_keys=options.max_site_keys, plugin_manager=pm,
            time_limit_seconds=options.time_limit_seconds, **alarm,
        )
        self.leak.prober = self.prober
        # The ray_metrics sink: reads the Prober's declarations, and exports its verdicts.
        self.ray_sink = _ray_sink(self.prober) if sinks else None
        self._exported: Any = None
        self.phase = phase
        self.alarm_on = bool(alarm)
        self.log = ResultLog(KeyKinds(lambda key: declared(self.prober, key), prefix),
                             site_keys=options.site_keys)
        self.last: dict[str, Any] = {}

    def start(self) -> ProcessProber:
        self.prober.start()
        if self.phase is not None:
            self.prober.start_phase(self.phase, step=0)
        return self

    def sample(self, step: Any, force: bool = False) -> dict[str, Any]:
        """One sample; then the alarm's latest verdicts to the ray_metrics sink, if new."""
        values = self.prober.sample(step=step, force=force)
        alarm = self.prober.alarm
        if self.ray_sink is not None and alarm is not None:
            latest = alarm.latest
            if latest is not None and latest is not self._exported:
                self._exported = latest
                self._export_leak()
        return values

    def _export_leak(self) -> None:
        """The leak keys' verdict to the ray_metrics sink: suspect while ``LeakState`` holds
        an alarm, the rates of the judged metrics, the culprits by rate."""
        leak = self.leak
        leak.refresh()
        head = mkeys.prefix_path(self.prober.prefix)
        judged = {head + m for m in JUDGED}
        verdicts = {k: v for k, v in leak.latest.items() if k in judged}
        culprits = sorted(leak.culprits, key=lambda c: -leak.culprits[c])
        self.ray_sink.write_verdicts(verdicts, list(leak.alarmed), culprits)

    def leak_values(self) -> dict[str, float]:
        """The leak keys (empty when the alarm is off)."""
        if not self.alarm_on:
            return {}
        return self.leak.values(self.log.cells if self.log.cells else self.last)

    def sample_all(self, step: Any) -> dict[str, Any]:
        """One sample with every key seen so far (latest values) and the leak keys: for
        results that are plain dicts (driver, learners), never missing a key."""
        if not self.last:
            # The first call samples twice with every probe, due or not, so that probes
            # on a schedule, and those reporting at their second sample (a tracing
            # window's end), are in the first iteration's keys too; the overhead
            # fraction, reported once measured over a second, reads 0 until then.
            self.sample(step, force=True)
            self.last[mkeys.make_key(self.prober.prefix, "overhead", "fraction")] = 0.0
            values = self.sample(step, force=True)
        else:
            values = self.sample(step)
        merged = self.last
        site = self.log.kinds
        keep_sites = self.log.site_keys
        for k, v in values.items():
            if keep_sites or not site(k)[2]:
                merged[k] = v
        merged.update(self.leak_values())
        return dict(merged)


class MemoryProbeCallback(RLlibCallback):
    """An RLlib callback that samples memprobe probes in every EnvRunner and the driver.

    ``config.callbacks(MemoryProbeCallback)`` runs the cheap default probes
    (process and gc) with the leak alarm on; :meth:`configure` returns a
    subclass with other options (:class:`CallbackOptions`), e.g.
    ``configure(diagnose=True)`` to name the culprit of a leak at a small cost.
    Works on the new API stack (metrics through ``metrics_logger``, landing in
    ``result["env_runners"]``) and on the old one (``episode.custom_metrics``).
    Each process builds its own :class:`memprobe.Prober` at its first callback;
    nothing is started at import or construction.

    :param flush_each_call: log the values at every hook call instead of once
        per ``sample()`` (for the plain functions of :func:`episode_end_callback`).
    """

    options: ClassVar[CallbackOptions] = CallbackOptions()

    def __init__(self, *, flush_each_call: bool = False) -> None:
        super().__init__()
        self._flush_each_call = flush_each_call
        self._env: ProcessProber | None = None
        self._driver: ProcessProber | None = None
        self._failed_build = False
        self._steps = 0
        self._internal_errors = 0
        self._driver_step: Any = None

    # -- configuration ---------------------------------------------------------------
    @classmethod
    def configure(cls, **options: Any) -> type[MemoryProbeCallback]:
        """A subclass with these options (:class:`CallbackOptions`), checked now, in the driver.

        :raises memprobe.ConfigError: naming the bad option.
        """
        merged = cls.options.replace(**options)
        sub = type(cls.__name__, (cls,), {"options": merged, "__module__": cls.__module__,
                                          "__qualname__": f"{cls.__qualname__}[configured]"})
        # Check the probes and plugins by building (never starting) a Prober.
        ProcessProber(merged, "driver", 0, prefix="memprobe/driver", step_name="", sink=False)
        if merged.ray_metrics:
            ray_metrics_plugin(_plugin_manager(merged.plugins, merged.load_entrypoints))
        return sub

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_env=None, _driver=None)
        return state

    # -- per-process Prober -----------------------------------------------------------
    @property
    def prober(self) -> memprobe.Prober | None:
        """This process's EnvRunner Prober (None before the first callback)."""
        return self._env.prober if self._env is not None else None

    @property
    def driver_prober(self) -> memprobe.Prober | None:
        """The driver's Prober (None before the first ``on_train_result``)."""
        return self._driver.prober if self._driver is not None else None

    def _get_env(self, env_runner: Any) -> ProcessProber | None:
        if self._env is None and not self._failed_build:
            index = getattr(env_runner, "worker_index", 0) or 0
            opts = self.options
            config = getattr(env_runner, "config", None)
            phase = EVALUATE if getattr(config, "in_evaluation", False) else None
            try:
                self._env = ProcessProber(opts, "env_runner", index, prefix="memprobe",
                                         step_name=STEP_NAMES[opts.trigger],
                                         phase=phase).start()
                _LIVE.add(self._env)
            except Exception as exc:
                self._failed_build = True
                self._internal_failure(exc)
        return self._env

    def _internal_failure(self, exc: BaseException) -> None:
        self._internal_errors += 1
        if self._internal_errors == 1:
            warn(f"memprobe_rllib: the callback failed ({type(exc).__name__}: {exc}); "
                 "counted in memprobe/errors/memprobe_rllib; training goes on")

    def _sample(self, env_runner: Any) -> None:
        env = self._get_env(env_runner)
        if env is not None:
            self._steps += 1
            try:
                env.log.add(env.sample(self._steps))
            except Exception as exc:  # a warnings filter turned a probe warning into an error
                self._internal_failure(exc)

    def _flush(self, metrics_logger: Any = None, custom_metrics: Any = None) -> None:
        env = self._env
        if env is None:
            return
        log = env.log
        leak = env.leak_values()
        if leak:
            log.add(leak)
        if self._internal_errors:
            log.add({"memprobe/errors/memprobe_rllib": self._internal_errors})
        if custom_metrics is not None:
            log.flush_custom_metrics(custom_metrics)
        else:
            log.flush(metrics_logger)

    # -- RLlib hooks ---------------------------------------------------------------------
    def on_episode_end(self, *, episode: Any = None, env_runner: Any = None,
                       metrics_logger: Any = None, worker: Any = None, **kwargs: Any) -> None:
        if not self.options.env_runners:
            return
        try:
            if self.options.trigger == "episode":
                self._sample(env_runner if env_runner is not None else worker)
            if metrics_logger is None and hasattr(episode, "custom_metrics"):
                self._flush(custom_metrics=episode.custom_metrics)  # old API stack
            elif metrics_logger is not None and self._flush_each_call:
                self._flush(metrics_logger)
        except Exception as exc:
            self._internal_failure(exc)

    def on_sample_end(self, *, env_runner: Any = None, metrics_logger: Any = None,
                      worker: Any = None, **kwargs: Any) -> None:
        if not self.options.env_runners:
            return
        try:
            env = self._env
            # trigger="episode" and no episode ended in this sample() call (episodes longer
            # than the batch): sample now, so that every iteration has fresh values.
            if self.options.trigger == "sample" or env is None or not env.log.pending:
                self._sample(env_runner if env_runner is not None else worker)
            if metrics_logger is not None:
                self._flush(metrics_logger)
        except Exception as exc:
            self._internal_failure(exc)

    # -- the driver: its Prober, its phases ----------------------------------------------
    def _get_driver(self) -> ProcessProber | None:
        """The driver's ProcessProber, built (in the ``train`` phase) at the first call."""
        if self._driver is None and self.options.driver:
            self._driver = ProcessProber(self.options, "driver", 0, prefix="memprobe/driver",
                                        step_name=STEP_NAMES["driver"])
            self._driver.start()
            _LIVE.add(self._driver)
            self._driver.prober.start_phase(TRAIN, step=0)
        return self._driver

    def _driver_label(self, action: str, label: str) -> None:
        """``start_phase``, ``end_phase`` or ``mark`` on the driver's Prober; a failure is
        counted and warned about once, never raised into training."""
        try:
            driver = self._get_driver()
            if driver is not None:
                getattr(driver.prober, action)(label, step=self._driver_step)
        except Exception as exc:
            self._internal_failure(exc)

    def on_algorithm_init(self, *, algorithm: Any = None, **kwargs: Any) -> None:
        try:
            self._get_driver()
        except Exception as exc:
            self._internal_failure(exc)

    def on_evaluate_start(self, *, algorithm: Any = None, **kwargs: Any) -> None:
        self._driver_label("start_phase", EVALUATE)

    def on_evaluate_end(self, *, algorithm: Any = None, **kwargs: Any) -> None:
        self._driver_label("end_phase", EVALUATE)

    def on_checkpoint_loaded(self, *, algorithm: Any = None, **kwargs: Any) -> None:
        self._driver_label("mark", "checkpoint_loaded")

    @classmethod
    def mark(cls, label: str) -> int:
        """Mark ``label`` on every Prober this callback built in this process (the
        driver's, in the driver): a labelled sample in the JSONL and in
        ``memprobe report``, e.g. ``MemoryProbeCallback.mark("lr_drop")`` between
        ``algo.train()`` calls. Returns how many Probers were marked (0 before any).

        :raises memprobe.ConfigError: a bad label (empty, with ``/``, too long).
        """
        marked = 0
        for probe in list(_LIVE):
            try:
                probe.prober.mark(label)
                marked += 1
            except ConfigError:
                raise
            except Exception as exc:
                warn(f"memprobe_rllib: mark({label!r}) failed: {exc!r}; training goes on")
        return marked

    def on_train_result(self, *, algorithm: Any = None, result: dict | None = None,
                        **kwargs: Any) -> None:
        if result is None:
            return
        self._driver_step = result.get("training_iteration")
        try:
            no_forecast_as_minus_one(result.get("env_runners"))
            evaluation = result.get("evaluation")
            if isinstance(evaluation, dict):
                no_forecast_as_minus_one(evaluation.get("env_runners"))
            if self.options.driver:
                self._get_driver()
                result.update(self._driver.sample_all(self._driver_step))
            if self.options.learners and algorithm is not None:
                result.update(self._sample_learners(algorithm))
        except Exception as exc:
            self._internal_failure(exc)
        if self._internal_errors:
            result["memprobe/driver/errors/memprobe_rllib"] = self._internal_errors

    def _sample_learners(self, algorithm: Any) -> dict[str, Any]:
        group = getattr(algorithm, "learner_group", None)
        if group is None or getattr(group, "is_local", True):
            return {}  # the local Learner runs in the driver: covered by memprobe/driver/
        step = self._driver_step
        results = group.foreach_learner(_learner_sample, options=self.options, step=step)
        out: dict[str, Any] = {}
        for r in results:
            if not getattr(r, "ok", True):
                continue
            index, values = r.get() if hasattr(r, "get") else r
            head = mkeys.prefix_path(f"memprobe/learner_{index}")
            for k, v in values.items():
                out[head + mkeys.short_key(k, LEARNER_PREFIX)] = v
        return out


# Every live ProcessProber a callback built in this process, for MemoryProbeCallback.mark
# (weak: a stopped Algorithm's callback and its Prober go when the Algorithm goes).
_LIVE: weakref.WeakSet[ProcessProber] = weakref.WeakSet()

#: The prefix a Learner's Prober writes under; the driver renames it ``memprobe/learner_<i>``.
LEARNER_PREFIX = "memprobe/learner"

# Learner actors: one ProcessProber per process per option set, kept between iterations.
_LEARNERS: dict[str, ProcessProber] = {}
_LEARNER_LOCK = threading.Lock()


def _learner_index(learner: Any) -> int:
    """The Learner's rank among the Learners (0 when it runs alone)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    return 0


def _learner_sample(learner: Any, options: CallbackOptions,
                    step: Any = None) -> tuple[int, dict[str, Any]]:
    index = _learner_index(learner)
    try:
        with _LEARNER_LOCK:
            probe = _LEARNERS.get(repr(options))
            if probe is None:
                probe = ProcessProber(options, "learner", index, prefix=LEARNER_PREFIX,
                                     step_name=STEP_NAMES["learner"]).start()
                _LEARNERS[repr(options)] = probe
        return index, probe.sample_all(step)
    except Exception as exc:
        warn(f"memprobe_rllib: sampling in a Learner failed: {exc!r}")
        return index, {mkeys.make_key(LEARNER_PREFIX, "errors", "memprobe_rllib"): 1}


class _HookFunction:
    """A picklable callable for ``config.callbacks(on_episode_end=...)`` and friends.

    Holds a configured callback class; builds its instance (and so its Prober)
    lazily in the process where it is first called. Used as a plain function it
    logs at every call (there is no later hook to batch the logging in).
    """

    def __init__(self, cls: type[MemoryProbeCallback], hook: str) -> None:
        self.cls = cls
        self.hook = hook
        self._instance: MemoryProbeCallback | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if self._instance is None:
            self._instance = self.cls(flush_each_call=True)
        getattr(self._instance, self.hook)(*args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        return {"cls": self.cls, "hook": self.hook, "_instance": None}

    def __repr__(self) -> str:
        return f"memprobe_rllib.{self.hook}_callback({self.cls.options!r})"


def episode_end_callback(**options: Any) -> _HookFunction:
    """A function for ``config.callbacks(on_episode_end=...)``: samples and logs per episode.

    Takes the options of :meth:`MemoryProbeCallback.configure` (checked now).
    """
    return _HookFunction(MemoryProbeCallback.configure(**options), "on_episode_end")


def sample_end_callback(**options: Any) -> _HookFunction:
    """A function for ``config.callbacks(on_sample_end=...)``: one sample per ``sample()`` call."""
    return _HookFunction(
        MemoryProbeCallback.configure(**{**options, "trigger": "sample"}), "on_sample_end"
    )


def train_result_callback(**options: Any) -> _HookFunction:
    """A function for ``config.callbacks(on_train_result=...)``: driver (and Learner) memory."""
    return _HookFunction(MemoryProbeCallback.configure(**options), "on_train_result")

