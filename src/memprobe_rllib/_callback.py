"""MemoryProbeCallback: memprobe's Prober inside RLlib EnvRunners, Learners and the driver."""

from __future__ import annotations

from typing import Any, ClassVar

from ray.rllib.callbacks.callbacks import RLlibCallback

import memprobe
from memprobe import ConfigError
from memprobe import keys as mkeys

from ._learners import LEARNER_PREFIX, learner_prefix, learner_sample
from ._options import TRIGGERS, CallbackOptions
from ._process import (
    EVALUATE,
    LIVE,
    STEP_NAMES,
    TRAIN,
    ProcessProber,
    jsonl_path,
    plugin_manager,
    ray_metrics_plugin,
)
from ._results import no_forecast_as_minus_one, warn

__all__ = [
    "TRIGGERS",
    "CallbackOptions",
    "MemoryProbeCallback",
    "jsonl_path",
]

#: The prefix of the driver's keys.
DRIVER_PREFIX = mkeys.join_prefix(mkeys.DEFAULT_PREFIX, "driver")

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
        memprobe.register_own(self)  # held by RLlib; what it holds is memprobe's

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
        ProcessProber(merged, "driver", 0, prefix=DRIVER_PREFIX, step_name="", sink=False)
        if merged.ray_metrics:
            ray_metrics_plugin(plugin_manager(merged.plugins, merged.load_entrypoints))
        return sub

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_env=None, _driver=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        memprobe.register_own(self)  # a copy made by unpickling, not by __init__

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
                LIVE.add(self._env)
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
            log.add({mkeys.make_key(env.prober.prefix, "errors", "memprobe_rllib"):
                     self._internal_errors})
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
            self._driver = ProcessProber(self.options, "driver", 0, prefix=DRIVER_PREFIX,
                                        step_name=STEP_NAMES["driver"])
            self._driver.start()
            LIVE.add(self._driver)
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
        for probe in list(LIVE):
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
            errors_key = mkeys.make_key(DRIVER_PREFIX, "errors", "memprobe_rllib")
            result[errors_key] = self._internal_errors

    def _sample_learners(self, algorithm: Any) -> dict[str, Any]:
        group = getattr(algorithm, "learner_group", None)
        if group is None or getattr(group, "is_local", True):
            return {}  # the local Learner runs in the driver: covered by memprobe/driver/
        step = self._driver_step
        results = group.foreach_learner(learner_sample, options=self.options, step=step)
        out: dict[str, Any] = {}
        for r in results:
            if not getattr(r, "ok", True):
                continue
            index, values = r.get() if hasattr(r, "get") else r
            head = learner_prefix(index)
            for k, v in values.items():
                out[mkeys.key_of(head, mkeys.short_key(k, LEARNER_PREFIX))] = v
        return out
