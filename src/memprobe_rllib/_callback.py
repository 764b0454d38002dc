"""MemoryProbeCallback: memprobe's Prober inside RLlib EnvRunners, Learners and the driver."""

from __future__ import annotations

import importlib
import os
import threading
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from ray.rllib.callbacks.callbacks import RLlibCallback

import memprobe
from memprobe import ConfigError
from memprobe._errors import did_you_mean, show
from memprobe._prober import parse_probes

#: ``trigger=`` values: sample at every episode end, or once per ``EnvRunner.sample()``.
TRIGGERS = ("episode", "sample")

_COUNTER_SUFFIXES = ("collections_count", "collected_count", "uncollectable_count", "_total")
_INTERVAL_SUFFIXES = ("/collection_seconds",)


def kind_of(key: str) -> str:
    """How a flat key is reduced: ``"counter"``, ``"interval"`` or ``"gauge"``.

    - counter: cumulative in its process and never decreasing (gc collections,
      ``*_total``, ``errors/*``). Logged as the increase since the last log,
      with ``reduce="lifetime_sum"``: the result is the total over all
      EnvRunners since training began (restarted EnvRunners keep adding).
    - interval: an amount for the time since the previous sample (gc
      ``collection_seconds``, ``overhead/*_seconds``, ``growth/*``). Summed
      over the samples, ``reduce="sum"``: the total in this iteration over
      all EnvRunners.
    - gauge: a level now (rss, fds, traced bytes, top sites...). Logged with
      ``reduce="mean"`` (mean over EnvRunners in the iteration); the process-
      level ``*_bytes`` gauges and ``num_fds`` also get ``<key>_max`` with
      ``reduce="max"`` (the largest EnvRunner).
    """
    if "/errors/" in key or key.endswith(_COUNTER_SUFFIXES):
        return "counter"
    if "/growth/" in key or key.endswith(_INTERVAL_SUFFIXES) or (
        "/overhead/" in key and key.endswith("_seconds")
    ):
        return "interval"
    return "gauge"


def wants_max(key: str) -> bool:
    """Whether a gauge also gets a ``<key>_max`` companion (``reduce="max"``)."""
    if "/top/" in key or "/overhead/" in key:
        return False
    return key.endswith("_bytes") or key.endswith("/num_fds")


def _safe_warn(message: str) -> None:
    # A warnings filter set to "error" (pytest) must not turn our report into a failure.
    try:
        warnings.warn(message, memprobe.MemprobeWarning, stacklevel=3)
    except Exception:
        pass


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


def jsonl_path(template: str, role: str, index: int | str) -> str:
    """The JSONL path for one process. ``template`` ending in ``.jsonl`` is a file
    template (``{role}``, ``{index}``, ``{pid}`` are replaced); anything else is a
    directory that gets ``memprobe-{role}-{index}-{pid}.jsonl``."""
    if not template.endswith(".jsonl"):
        template = os.path.join(template, "memprobe-{role}-{index}-{pid}.jsonl")
    return template.replace("{role}", role).replace("{index}", str(index))


class MemoryProbeCallback(RLlibCallback):
    """An RLlib callback that samples memprobe probes in every EnvRunner and the driver.

    ``config.callbacks(MemoryProbeCallback)`` runs the cheap default probes
    (process and gc); :meth:`configure` returns a subclass with other options.
    Works on the new API stack (metrics through ``metrics_logger``, landing in
    ``result["env_runners"]``) and on the old one (``episode.custom_metrics``,
    landing in ``result["env_runners"]["custom_metrics"]`` as ``_mean/_min/_max``).
    Each process builds its own :class:`memprobe.Prober` at its first callback;
    nothing is started at import or construction.
    """

    # Options: plain class attributes, so configured subclasses pickle (cloudpickle) cleanly.
    probes: ClassVar[Any] = None
    every: ClassVar[int] = 1
    interval_seconds: ClassVar[float] = 0.0
    budget: ClassVar[float | None] = None
    history: ClassVar[int] = 100
    max_failures: ClassVar[int] = 3
    max_site_keys: ClassVar[int] = 100
    load_entrypoints: ClassVar[bool] = True
    plugins: ClassVar[tuple[str, ...]] = ()
    jsonl: ClassVar[str | None] = None
    trigger: ClassVar[str] = "episode"
    env_runners: ClassVar[bool] = True
    driver: ClassVar[bool] = True
    learners: ClassVar[bool] = True
    leak_every: ClassVar[int | None] = None
    time_limit_seconds: ClassVar[float | None] = None

    _OPTIONS: ClassVar[tuple[str, ...]] = (
        "probes", "every", "interval_seconds", "budget", "history", "max_failures",
        "max_site_keys", "load_entrypoints", "plugins", "jsonl", "trigger",
        "env_runners", "driver", "learners", "leak_every", "time_limit_seconds",
    )

    def __init__(self) -> None:
        super().__init__()
        self._prober: Any = None
        self._driver_prober: Any = None
        self._failed_build = False
        self._defer = True  # new stack, class use: log once per sample() (cheaper)
        self._steps = 0
        self._pending: dict[str, list[float]] = {}  # key -> [last, max, sum]
        self._logged_counters: dict[str, float] = {}
        self._internal_errors = 0
        self._sample_calls = 0

    # -- configuration ---------------------------------------------------------------
    @classmethod
    def options(cls) -> dict[str, Any]:
        """This class's options, as a dict."""
        return {name: getattr(cls, name) for name in cls._OPTIONS}

    @classmethod
    def configure(cls, **options: Any) -> type[MemoryProbeCallback]:
        """A subclass with these options, validated now (in the driver).

        :param probes: as :class:`memprobe.Prober` (names or ``{name: options}``,
            each with optional ``every`` / ``interval_seconds``).
        :param every: sample at most once per this many triggers (episodes or sample() calls).
        :param interval_seconds: and at most once per this many seconds.
        :param budget: fraction of wall time the probes may take.
        :param history: samples each process keeps.
        :param max_failures: a probe failing this many times in a row is disabled.
        :param max_site_keys: distinct allocation-site / type keys per process.
        :param load_entrypoints: load third-party probes from entry points.
        :param plugins: importable module names registered as memprobe plugins in
            every process (for probes not installed through an entry point).
        :param jsonl: also write JSONL per process: a directory, or a path
            ending in ``.jsonl`` with ``{role}``, ``{index}``, ``{pid}``.
        :param trigger: ``"episode"`` (default; a ``sample()`` call in which no
            episode ended samples once at its end, so that every iteration has
            the keys) or ``"sample"`` (once per ``EnvRunner.sample()`` call,
            cheaper with short episodes).
        :param env_runners: probe in the EnvRunners.
        :param driver: probe the Algorithm's process in ``on_train_result``.
        :param learners: probe remote Learner actors (``num_learners > 0``).
        :param leak_every: every this many ``sample()`` calls, judge each
            EnvRunner's history with :func:`memprobe.leaks.analyze_samples` and log
            ``memprobe/leak/<metric>/rate_per_step`` and ``.../suspect`` (0/1).
        :param time_limit_seconds: every probe's time limit, as
            :class:`memprobe.Prober`'s: a probe whose ``sample()`` takes longer has
            its values dropped and is counted in ``memprobe/timeouts/<probe>``
            (a probe's own ``time_limit_seconds`` in ``probes`` wins).
        :raises memprobe.ConfigError: naming the bad option.
        """
        unknown = sorted(set(options) - set(cls._OPTIONS))
        if unknown:
            hints = []
            for u in unknown:
                hint = did_you_mean(u, cls._OPTIONS)
                hints.append(f"{u!r} ({hint})" if hint else repr(u))
            raise ConfigError(
                "MemoryProbeCallback.configure",
                f"unknown option {', '.join(hints)}; options are {', '.join(cls._OPTIONS)}",
            )
        merged = {**cls.options(), **options}
        if merged["trigger"] not in TRIGGERS:
            raise ConfigError("trigger", f"must be one of {TRIGGERS}, got {merged['trigger']!r}")
        for flag in ("env_runners", "driver", "learners", "load_entrypoints"):
            if not isinstance(merged[flag], bool):
                raise ConfigError(flag, f"must be a bool, got {merged[flag]!r}")
        if not (merged["env_runners"] or merged["driver"] or merged["learners"]):
            raise ConfigError("env_runners", "env_runners, driver and learners are all False: "
                              "nothing would be probed")
        plugins = merged["plugins"]
        if not isinstance(plugins, (list, tuple)) or not all(isinstance(p, str) for p in plugins):
            raise ConfigError("plugins", f"must be a list of module names, got {show(plugins)}")
        merged["plugins"] = tuple(plugins)
        le = merged["leak_every"]
        if le is not None and (not isinstance(le, int) or isinstance(le, bool) or le < 1):
            raise ConfigError("leak_every", f"must be None or an int >= 1, got {show(le)}")
        jsonl = merged["jsonl"]
        if jsonl is not None:
            if not isinstance(jsonl, (str, os.PathLike)):
                raise ConfigError("jsonl", f"must be a path or None, got {show(jsonl)}")
            merged["jsonl"] = os.path.abspath(os.fspath(jsonl))
        probes = merged["probes"]
        if probes is not None and not isinstance(probes, str):
            probes = parse_probes(probes)  # a ConfigError naming the bad part
        merged["probes"] = probes
        # Validate by building (never starting) a Prober, then drop it.
        attrs = dict(merged)
        sub = type(cls.__name__, (cls,), {**attrs, "__module__": cls.__module__,
                                          "__qualname__": f"{cls.__qualname__}[configured]"})
        sub._build_prober("driver", 0, sink=False)
        return sub

    @classmethod
    def _build_prober(cls, role: str, index: int | str, *, sink: bool = True,
                      prefix: str = "memprobe") -> memprobe.Prober:
        pm = _plugin_manager(cls.plugins, cls.load_entrypoints)
        path = None
        if sink and cls.jsonl is not None:
            path = memprobe.JsonlSink(
                jsonl_path(cls.jsonl, role, index), tags={"role": role, "env_runner": index}
            )
        return memprobe.Prober(
            cls.probes, every=cls.every, interval_seconds=cls.interval_seconds,
            budget=cls.budget, history=cls.history, max_failures=cls.max_failures,
            sink=path, tags=None, prefix=prefix, max_site_keys=cls.max_site_keys,
            plugin_manager=pm, time_limit_seconds=cls.time_limit_seconds,
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_prober=None, _driver_prober=None)
        return state

    # -- per-process Prober -----------------------------------------------------------
    @property
    def prober(self) -> memprobe.Prober | None:
        """This process's EnvRunner Prober (None before the first callback)."""
        return self._prober

    def _get_prober(self, env_runner: Any) -> memprobe.Prober | None:
        if self._prober is None and not self._failed_build:
            index = getattr(env_runner, "worker_index", 0) or 0
            try:
                self._prober = self._build_prober("env_runner", index).start()
            except Exception as exc:
                self._failed_build = True
                self._internal_failure(exc)
        return self._prober

    def _internal_failure(self, exc: BaseException) -> None:
        self._internal_errors += 1
        if self._internal_errors == 1:
            _safe_warn(f"memprobe_rllib: the callback failed ({type(exc).__name__}: {exc}); "
                       "counted in memprobe/errors/memprobe_rllib; training goes on")

    def _sample(self, env_runner: Any) -> dict[str, Any]:
        prober = self._get_prober(env_runner)
        values: dict[str, Any] = {}
        if prober is not None:
            self._steps += 1
            try:
                values = prober.sample(step=self._steps)
            except Exception as exc:  # a warnings filter turned a probe warning into an error
                self._internal_failure(exc)
                values = {}
        if self._internal_errors:
            values["memprobe/errors/memprobe_rllib"] = self._internal_errors
        return values

    def _add_pending(self, values: Mapping[str, Any]) -> None:
        pend = self._pending
        for k, v in values.items():
            slot = pend.get(k)
            if slot is None:
                pend[k] = [v, v, v]
            else:
                slot[0] = v
                if v > slot[1]:
                    slot[1] = v
                slot[2] += v

    def _flush(self, metrics_logger: Any) -> None:
        if not self._pending:
            return
        pend, self._pending = self._pending, {}
        logged = self._logged_counters
        for key, (last, biggest, total) in pend.items():
            kind = kind_of(key)
            if kind == "gauge":
                metrics_logger.log_value(key, last, reduce="mean")
                if wants_max(key):
                    metrics_logger.log_value(key + "_max", biggest, reduce="max")
            elif kind == "counter":
                metrics_logger.log_value(key, last - logged.get(key, 0), reduce="lifetime_sum")
                logged[key] = last
            else:
                metrics_logger.log_value(key, total, reduce="sum")

    # -- RLlib hooks ---------------------------------------------------------------------
    def on_episode_end(self, *, episode: Any = None, env_runner: Any = None,
                       metrics_logger: Any = None, worker: Any = None, **kwargs: Any) -> None:
        if not self.env_runners:
            return
        try:
            old_stack = metrics_logger is None and hasattr(episode, "custom_metrics")
            if self.trigger == "episode":
                self._add_pending(self._sample(env_runner if env_runner is not None else worker))
            if old_stack:
                pend, self._pending = self._pending, {}
                for key, (last, _biggest, total) in pend.items():
                    episode.custom_metrics[key] = total if kind_of(key) == "interval" else last
            elif metrics_logger is not None and not self._defer:
                self._flush(metrics_logger)
        except Exception as exc:
            self._internal_failure(exc)

    def on_sample_end(self, *, env_runner: Any = None, metrics_logger: Any = None,
                      worker: Any = None, **kwargs: Any) -> None:
        if not self.env_runners:
            return
        try:
            # trigger="episode" and no episode ended in this sample() call (episodes longer
            # than the batch): sample now, or the iteration's results would lack the keys.
            if self.trigger == "sample" or (metrics_logger is not None and not self._pending):
                self._add_pending(self._sample(env_runner if env_runner is not None else worker))
            if self.leak_every is not None and self._prober is not None:
                self._sample_calls += 1
                if self._sample_calls % self.leak_every == 0:
                    self._add_pending(self._leak_metrics())
            if metrics_logger is not None:
                self._flush(metrics_logger)
        except Exception as exc:
            self._internal_failure(exc)

    def _leak_metrics(self) -> dict[str, float]:
        from memprobe import leaks

        report = leaks.analyze_samples(list(self._prober.history), sites=True)
        out: dict[str, float] = {}
        for v in report.verdicts.values():
            if v.status == "insufficient" or "/top/" in v.key:
                continue
            short = v.key[len("memprobe/"):] if v.key.startswith("memprobe/") else v.key
            out[f"memprobe/leak/{short}/rate_per_step"] = float(v.slope_per_step)
            out[f"memprobe/leak/{short}/suspect"] = 1.0 if v.leak else 0.0
        out["memprobe/leak/suspect"] = 1.0 if report.leak else 0.0
        return out

    def on_train_result(self, *, algorithm: Any = None, result: dict | None = None,
                        **kwargs: Any) -> None:
        if result is None:
            return
        try:
            if self.driver:
                if self._driver_prober is None:
                    self._driver_prober = self._build_prober(
                        "driver", 0, prefix="memprobe/driver").start()
                result.update(self._driver_prober.sample(step=result.get("training_iteration")))
            if self.learners and algorithm is not None:
                result.update(self._sample_learners(algorithm))
        except Exception as exc:
            self._internal_failure(exc)
            result["memprobe/driver/errors/memprobe_rllib"] = self._internal_errors

    def _sample_learners(self, algorithm: Any) -> dict[str, Any]:
        group = getattr(algorithm, "learner_group", None)
        if group is None or getattr(group, "is_local", True):
            return {}  # the local Learner runs in the driver: covered by memprobe/driver/
        options = type(self).options()
        results = group.foreach_learner(_learner_sample, options=options, cls=type(self))
        out: dict[str, Any] = {}
        for i, r in enumerate(results):
            ok = getattr(r, "ok", True)
            if not ok:
                continue
            values = r.get() if hasattr(r, "get") else r
            for k, v in values.items():
                out[f"memprobe/learner_{i}/" + k[len("memprobe/learner/"):]] = v
        return out


# Learner actors: one Prober per process per option set, kept between iterations.
_LEARNER_PROBERS: dict[str, memprobe.Prober] = {}
_LEARNER_LOCK = threading.Lock()


def _learner_sample(learner: Any, options: dict[str, Any],
                    cls: type[MemoryProbeCallback]) -> dict[str, Any]:
    key = repr(sorted(options.items(), key=lambda kv: kv[0]))
    with _LEARNER_LOCK:
        prober = _LEARNER_PROBERS.get(key)
        if prober is None:
            prober = cls._build_prober("learner", os.getpid(), prefix="memprobe/learner").start()
            _LEARNER_PROBERS[key] = prober
    try:
        return dict(prober.sample())
    except Exception as exc:
        _safe_warn(f"memprobe_rllib: sampling in a Learner failed: {exc!r}")
        return {"memprobe/learner/errors/memprobe_rllib": 1}


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
            self._instance = self.cls()
            self._instance._defer = False
        getattr(self._instance, self.hook)(*args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        return {"cls": self.cls, "hook": self.hook, "_instance": None}

    def __repr__(self) -> str:
        return f"memprobe_rllib.{self.hook}_callback({self.cls.options()!r})"


def episode_end_callback(**options: Any) -> _HookFunction:
    """A function for ``config.callbacks(on_episode_end=...)``: samples and logs per episode.

    Takes the options of :meth:`MemoryProbeCallback.configure` (validated now).
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
