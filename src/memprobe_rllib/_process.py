"""A process's memprobe inside RLlib: its Prober, its leak state and its result keys,
one per EnvRunner, Learner or driver process (:class:`ProcessProber`)."""

from __future__ import annotations

import importlib
import os
import weakref
from collections.abc import Iterable
from typing import Any

import memprobe
from memprobe import ConfigError
from memprobe import keys as mkeys

from ._leak import JUDGED, LeakState
from ._options import CallbackOptions
from ._results import KeyKinds, ResultLog, declared

__all__ = ["LIVE", "STEP_NAMES", "ProcessProber", "jsonl_path", "plugin_manager",
           "ray_metrics_plugin"]

#: What one sample is, per process role and trigger (for the warning and the docs).
STEP_NAMES = {
    "episode": "a sample at each episode end",
    "sample": "a sample per EnvRunner.sample() call",
    "driver": "a sample per train() iteration",
    "learner": "a sample per train() iteration",
}


def plugin_manager(plugins: Iterable[str], load_entrypoints: bool) -> Any:
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


def jsonl_template(jsonl: str | bool | None) -> str | None:
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


def node_id() -> str:
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


def ray_sink_of(prober: memprobe.Prober) -> Any:
    """The prober's :class:`memprobe_ray.RayMetricsSink`, bound to it, or None."""
    from memprobe_ray import RayMetricsSink

    sink = next((s for s in prober.sinks if isinstance(s, RayMetricsSink)), None)
    return None if sink is None else sink.bind(prober)


def ray_metrics_plugin(pm: Any) -> None:
    """Register memprobe_ray's sink plugin in ``pm`` (entry points may be off or absent).

    :raises ConfigError: naming ``pip install "pymemprobe[ray]"`` when Ray's metrics
        cannot export here.
    """
    try:
        import memprobe_ray
        import memprobe_ray.plugin as plugin

        memprobe_ray.require_ray_metrics()
    except ImportError as exc:
        raise ConfigError("ray_metrics", str(exc) if "pymemprobe[ray]" in str(exc) else
                          f'needs memprobe_ray: pip install "pymemprobe[ray]" ({exc})') from None
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
        where = jsonl_template(options.jsonl) if sink else None
        if where is not None:
            tags: dict[str, Any] = {"role": role}
            if role != "driver":
                tags[role] = index
            node = node_id()
            if node:
                tags["node"] = node
            path = memprobe.JsonlSink(jsonl_path(where, role, index), tags=tags)
        alarm: dict[str, Any] = {}
        if options.leak_check_every is not None:
            alarm = {"on_leak": self.leak.on_leak, "leak_check_every": options.leak_check_every,
                     "leak_confirmations": options.leak_confirmations,
                     "leak_options": options.alarm_options}
        pm = plugin_manager(options.plugins, options.load_entrypoints)
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
        self.ray_sink = ray_sink_of(self.prober) if sinks else None
        self._exported: Any = None
        self.phase = phase
        self.alarm_on = bool(alarm)
        self.log = ResultLog(KeyKinds(lambda key: declared(self.prober, key), prefix),
                             site_keys=options.site_keys)
        self.last: dict[str, Any] = {}
        # This state (the result log's cells, the latest values, the leak state) is held
        # by RLlib's callback object, not by a memprobe module: counted as memprobe's,
        # not the user's, by an objects count, a capture and a referrer walk.
        memprobe.register_own(self)

    def start(self) -> ProcessProber:
        self.prober.start()
        if self.phase is not None:
            self.prober.start_phase(self.phase, step=0)
        return self

    def sample(self, step: Any, force: bool = False) -> dict[str, Any]:
        """One sample; then the alarm's latest verdicts to the ray_metrics sink, if new."""
        values = self.prober.sample(step=step, force=force)
        self.leak.saw(values)
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
        judged = {mkeys.key_of(self.prober.prefix, m) for m in JUDGED}
        verdicts = {k: v for k, v in leak.latest.items() if k in judged}
        culprits = [name for name, _ in leak.ranked_culprits()]
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


# Every live ProcessProber a callback built in this process, for MemoryProbeCallback.mark
# (weak: a stopped Algorithm's callback and its Prober go when the Algorithm goes).
LIVE: weakref.WeakSet[ProcessProber] = weakref.WeakSet()
