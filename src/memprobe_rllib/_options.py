"""The options of :class:`memprobe_rllib.MemoryProbeCallback`, in one place.

:class:`CallbackOptions` is a frozen dataclass: its fields are the options of
``MemoryProbeCallback.configure(...)``, their defaults and their checks. A
configured callback class carries one instance of it (``cls.options``), which
pickles with the class when Ray ships the config to EnvRunners.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memprobe import ConfigError

#: ``trigger=`` values: sample at every episode end, or once per ``EnvRunner.sample()``.
TRIGGERS = ("episode", "sample")

#: What ``diagnose=True`` runs: the cheap probes at every trigger, and the
#: expensive ones in windows. tracemalloc traces one episode of every
#: ``DIAGNOSE_PERIOD`` (allocation runs at full speed in the others) and reports
#: the blocks allocated in that window and still alive at its end
#: (``survivors/<site>``); the objects probe counts live objects by type once
#: per ``DIAGNOSE_PERIOD`` episodes and at most once per ``DIAGNOSE_OBJECTS_SECONDS``.
#: docs/rllib.md has the cost of each mode.
DIAGNOSE_PERIOD = 25
#: tracemalloc's windows also run during at most this fraction of the process's CPU
#: time (the next window waits, past ``DIAGNOSE_PERIOD`` episodes, until the last
#: one's CPU time is this fraction of the CPU time since it opened). Tracing with 4
#: frames slows an EnvRunner's episodes about 8-fold while it runs, so one traced
#: episode in 25 cost some 15% of env steps/s; held to 6% of the work, tracing costs
#: at most 6% x (1 - 1/8) = 5.3% (docs/rllib.md, "Cost of each mode").
DIAGNOSE_TRACING_FRACTION = 0.06
#: The objects probe's walk of the heap takes tenths of a second in an EnvRunner:
#: once per two minutes is about half a percent of wall time. The budget alone
#: would give it what the cheaper probes leave, some 2%; the type of a leak is
#: named by the alarm's capture when it fires.
DIAGNOSE_OBJECTS_SECONDS = 120.0
#: ``diagnose=True`` also gives the Probers this overhead budget (fraction of wall
#: time), unless ``budget=`` is set: a probe whose samples cost more runs less
#: often (the objects probe walks the whole heap: tenths of a second in an EnvRunner).
DIAGNOSE_BUDGET = 0.03
DIAGNOSE_PROBES: Mapping[str, Mapping[str, Any]] = {
    "process": {},
    "gc": {"blocks": True},
    "tracemalloc": {"window_steps": 1, "period_steps": DIAGNOSE_PERIOD, "top": 10,
                    "max_tracing_fraction": DIAGNOSE_TRACING_FRACTION},
    "objects": {"every": DIAGNOSE_PERIOD, "interval_seconds": DIAGNOSE_OBJECTS_SECONDS,
                "top": 10},
}


#: The alarm's verdict options by default. The growth floor is
#: :func:`memprobe.analyze_samples`' own default (0.5% of the process's resident
#: size over the window judged), so ``memprobe report`` on the adapter's files
#: judges the same as the live alarm.
#: The alarm judges only the metrics that get keys of their own (``metrics``), on at
#: most 40 points (``max_points``), without per-site and per-type verdicts
#: (``sites``): a check then stays cheap (docs/performance.md), and the
#: adapter names the culprit from the history itself (memprobe_rllib._leak).
LEAK_OPTIONS: Mapping[str, Any] = {
    "metrics": ("process/rss_bytes", "process/num_fds", "tracemalloc/filtered_bytes",
                "objects/total_count", "gc/allocated_blocks"),
    "sites": False,
    "max_points": 40,
}


def show(value: Any) -> str:
    """A short ``repr`` for error messages, with the type: ``'yes' (str)``."""
    try:
        text = repr(value)
    except ValueError:  # an int over Python's digit limit for printing
        text = f"<int of {value.bit_length()} bits>" if isinstance(value, int) else "<value>"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def did_you_mean(name: str, known: Any) -> str:
    """``"did you mean 'x'?"`` for the closest of ``known``, or ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"did you mean {close[0]!r}?" if close else ""


def _check_int(option: str, value: Any, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(option, f"must be an int >= {minimum}, got {show(value)}")


@dataclass(frozen=True)
class CallbackOptions:
    """Every option of :meth:`MemoryProbeCallback.configure`, checked at construction.

    :ivar probes: as :class:`memprobe.Prober` (names, or ``{name: options}``
        with each probe's own ``every`` / ``interval_seconds``); ``None``: the
        default probes (process, gc), or :data:`DIAGNOSE_PROBES` with ``diagnose``.
    :ivar diagnose: run all four probes, the expensive ones (tracemalloc,
        objects) in windows (:data:`DIAGNOSE_PROBES`), cheap enough to leave on.
    :ivar every: sample at most once per this many triggers.
    :ivar interval_seconds: and at most once per this many seconds.
    :ivar budget: fraction of wall time the probes may take.
    :ivar history: samples each process keeps (what the leak alarm judges).
    :ivar max_failures: a probe failing this many times in a row is disabled.
    :ivar max_site_keys: distinct allocation-site / type keys per process.
    :ivar site_keys: also put the per-site and per-type keys
        (``tracemalloc/top/<site>/...``, ``objects/top/<type>/...``) in the RLlib
        results; a key then appears when its site first shows up (and is logged,
        0 when absent, at every iteration after that). They are always in the JSONL.
    :ivar load_entrypoints: load third-party probes from entry points.
    :ivar plugins: importable module names registered as memprobe plugins in every process.
    :ivar jsonl: also write JSONL per process: a directory, or a path ending in
        ``.jsonl`` with ``{role}``, ``{index}``, ``{pid}``; ``True`` for each node's
        Ray session log directory (``<session logs>/memprobe/<node id>/``), which
        ``memprobe report --ray`` reads from every node.
    :ivar trigger: ``"episode"`` or ``"sample"`` (see :data:`TRIGGERS`).
    :ivar env_runners: probe in the EnvRunners.
    :ivar driver: probe the Algorithm's process in ``on_train_result``.
    :ivar learners: probe remote Learner actors (``num_learners > 0``).
    :ivar leak_check_every: the leak alarm (:class:`memprobe.Prober`'s) judges
        each process's history every this many samples; ``None`` turns it off.
    :ivar leak_confirmations: a metric must be judged leaking at this many
        checks in a row before it is reported.
    :ivar leak_options: options of :func:`memprobe.analyze_samples` for the alarm;
        ``None``: :data:`LEAK_OPTIONS`.
    :ivar time_limit_seconds: every probe's time limit, as :class:`memprobe.Prober`'s.
    :ivar ray_metrics: also export every process's samples and leak verdicts to
        Prometheus through Ray's metrics (:func:`memprobe_ray.rllib_sink`; needs
        ``pip install "pymemprobe[ray]"``), beside the JSONL.
    """

    probes: Any = None
    diagnose: bool = False
    every: int = 1
    interval_seconds: float = 0.0
    budget: float | None = None
    history: int = 200
    max_failures: int = 3
    max_site_keys: int = 100
    site_keys: bool = False
    load_entrypoints: bool = True
    plugins: tuple[str, ...] = ()
    jsonl: str | bool | None = None
    trigger: str = "episode"
    env_runners: bool = True
    driver: bool = True
    learners: bool = True
    leak_check_every: int | None = 20
    leak_confirmations: int = 2
    leak_options: Any = None
    time_limit_seconds: float | None = None
    ray_metrics: bool = False

    def __post_init__(self) -> None:
        if self.trigger not in TRIGGERS:
            raise ConfigError("trigger", f"must be one of {TRIGGERS}, got {show(self.trigger)}")
        for flag in ("diagnose", "site_keys", "env_runners", "driver", "learners",
                     "load_entrypoints", "ray_metrics"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(flag, f"must be a bool, got {show(getattr(self, flag))}")
        if not (self.env_runners or self.driver or self.learners):
            raise ConfigError("env_runners", "env_runners, driver and learners are all False: "
                              "nothing would be probed")
        plugins = self.plugins
        if not isinstance(plugins, (list, tuple)) or not all(isinstance(p, str) for p in plugins):
            raise ConfigError("plugins", f"must be a list of module names, got {show(plugins)}")
        object.__setattr__(self, "plugins", tuple(plugins))
        if self.leak_check_every is not None:
            _check_int("leak_check_every", self.leak_check_every, 1)
        _check_int("leak_confirmations", self.leak_confirmations, 1)
        _check_int("history", self.history, 1)
        if self.jsonl is False:
            object.__setattr__(self, "jsonl", None)
        if self.jsonl is not None and self.jsonl is not True:
            if not isinstance(self.jsonl, (str, os.PathLike)):
                raise ConfigError("jsonl", f"must be a path, True or None, got {show(self.jsonl)}")
            object.__setattr__(self, "jsonl", os.path.abspath(os.fspath(self.jsonl)))
        if self.leak_options is not None and not isinstance(self.leak_options, Mapping):
            raise ConfigError("leak_options", f"must be a mapping, got {show(self.leak_options)}")
        if self.diagnose and self.probes is not None:
            raise ConfigError("diagnose", "diagnose=True chooses the probes itself; "
                              "give either diagnose=True or probes=...")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def check_names(cls, options: Mapping[str, Any], where: str) -> None:
        """:raises ConfigError: an option that does not exist, with the closest name."""
        known = cls.names()
        for name in options:
            if name not in known:
                hint = did_you_mean(name, known)
                raise ConfigError(
                    where, f"unknown option {name!r}{' (' + hint + ')' if hint else ''}; "
                    f"options are {', '.join(known)}",
                )

    def replace(self, **changes: Any) -> CallbackOptions:
        """These options with some changed (checked again)."""
        self.check_names(changes, "MemoryProbeCallback.configure")
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """``{option: value}`` for every option."""
        return {name: getattr(self, name) for name in self.names()}

    @property
    def prober_budget(self) -> float | None:
        """What the Probers are given as ``budget=``."""
        if self.budget is None and self.diagnose:
            return DIAGNOSE_BUDGET
        return self.budget

    @property
    def alarm_options(self) -> dict[str, Any]:
        """What the Probers are given as ``leak_options=``."""
        return dict(LEAK_OPTIONS if self.leak_options is None else self.leak_options)

    @property
    def probe_spec(self) -> Any:
        """What the Probers are given as ``probes=``."""
        if self.diagnose:
            return {name: dict(opts) for name, opts in DIAGNOSE_PROBES.items()}
        return self.probes
