"""The ``ray_metrics`` sink: every sample exported through ``ray.util.metrics``.

Ray's per-node metrics agent collects what each worker records and serves it to
Prometheus (``ray_`` is prepended to each name). One sink lives in each process
and creates its Ray metric objects there, on first use.

Tags are bounded by design: ``role``, ``name`` (an actor class, a task name or a
name the user gives), ``index`` (an EnvRunner's or Learner's index, or ``""``)
and ``node`` (the Ray node id). Never the pid: a restarted actor with the same
role, name and index continues the same series. A site or type tag (``site``)
goes to the ``max_sites`` sites of each sample with the largest values; the
others are summed under ``site="other"``. So a process has at most
``max_sites + 1`` series per site metric at any time; a site that leaves the top
is no longer recorded, and Ray's agent drops its series.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from memprobe import Sample, describe_key
from memprobe.keys import infer_prefix, split_key
from memprobe.metrics import Metric

from ._names import PromMetric, prom_metric

#: The tags every memprobe series carries.
TAG_KEYS = ("role", "name", "index", "node")
#: The install hint the missing-extra error gives.
EXTRA_HINT = 'pip install "pymemprobe[ray]"'
#: How many culprits (sites or types) of a leak verdict are exported, ranked 1..N.
MAX_CULPRITS = 3
#: The leak gauges with a tag: a culprit's rank, an alarmed count metric's rate.
CULPRIT_RANK = "memprobe_leak_culprit_rank"
COUNT_RATE = "memprobe_leak_count_rate_per_hour"
#: The leak gauges with a tag of their own: name -> (tag key, description).
TAGGED = {
    CULPRIT_RANK: ("culprit", "rank of a likely leak cause (1: likeliest; 0: not now)"),
    COUNT_RATE: ("metric", "growth per hour of an alarmed metric that counts things "
                           "(fds, objects, blocks; 0 once no longer alarmed)"),
}
#: The descriptions of the process's leak gauges.
LEAK_DESCRIPTIONS = {
    "memprobe_leak_suspect": "1 while the leak alarm of this process has confirmed a leak",
    "memprobe_leak_rate_per_hour_bytes": "growth per hour of the fastest alarmed metric in bytes",
    "memprobe_leak_hours_to_oom": "hours until the resident size reaches the nearest memory "
                                  "limit at its judged rate; -1 when not growing",
}


class RayMetricsUnavailable(ImportError):
    """ray.util.metrics cannot export here: ray, or ray[default]'s metrics agent, is missing."""


def require_ray_metrics() -> Any:
    """``ray.util.metrics``, or a one-line :class:`RayMetricsUnavailable` naming the extra.

    Without ``ray[default]`` Ray's metrics agent loads no exporter and every
    recorded value is silently dropped, so that case is an error too.
    """
    try:
        import ray.util.metrics as ray_metrics
    except ImportError as exc:
        raise RayMetricsUnavailable(
            f"the ray_metrics sink needs Ray with its metrics agent: {EXTRA_HINT} ({exc})"
        ) from None
    try:
        import aiohttp  # noqa: F401  (ray[default]'s agent modules need these)
        import opencensus  # noqa: F401
        import prometheus_client  # noqa: F401
    except ImportError as exc:
        raise RayMetricsUnavailable(
            f"the ray_metrics sink needs ray[default], whose metrics agent exports to "
            f"Prometheus: {EXTRA_HINT} (missing {exc.name})"
        ) from None
    return ray_metrics


def current_node() -> str:
    """The Ray node id of this process (``""`` outside a Ray worker or driver)."""
    try:
        import ray

        if ray.is_initialized():
            return str(ray.get_runtime_context().get_node_id())
    except Exception:  # a tag is never worth failing a sample for
        pass
    return ""


class _Declarations:
    """Finds the declaration of a key: the Prober's, else its probe class's, else the default."""

    def __init__(self) -> None:
        self._prober: Callable[[], Any] = lambda: None

    @property
    def prober(self) -> Any:
        """The Prober whose ``describe`` is read (held weakly: a sink does not keep its
        Prober, and so its probes' hooks, alive), or None."""
        return self._prober()

    @prober.setter
    def prober(self, prober: Any) -> None:
        self._prober = (lambda: None) if prober is None else weakref.ref(prober)

    def __call__(self, key: str, prefix: str) -> Metric:
        describe = getattr(self.prober, "describe", None)
        if describe is not None:
            try:
                found = describe(key)
                if isinstance(found, Metric):
                    return found
            except Exception:  # a key the Prober does not know: the lookups below
                pass
        return describe_key(key, prefix)


class RayMetricsSink:
    """Exports each sample through ``ray.util.metrics``: usable as ``Prober(sink=...)``.

    :param role: ``driver``, ``env_runner``, ``learner``, ``worker``, ``actor``, ``task``...
    :param name: an actor class, a task name or any name of the user's (a bounded set!).
    :param index: an EnvRunner's or Learner's index, or ``""``.
    :param node: the Ray node id; default: this process's, when Ray is initialized.
    :param max_sites: sites per metric with their own ``site`` tag in each sample, the
        largest (the rest: ``site="other"``); also the most culprit tags per process.
    :raises RayMetricsUnavailable: ray[default] is not installed.
    """

    def __init__(self, *, role: str = "worker", name: str = "", index: int | str = "",
                 node: str | None = None, max_sites: int = 5) -> None:
        self._ray_metrics = require_ray_metrics()
        if not isinstance(max_sites, int) or isinstance(max_sites, bool) or max_sites < 0:
            raise ValueError(f"max_sites must be an int >= 0, got {max_sites!r}")
        self.max_sites = max_sites
        self.tags = {"role": str(role), "name": str(name), "index": str(index),
                     "node": current_node() if node is None else str(node)}
        self.describe = _Declarations()
        self._lock = threading.Lock()
        self._prefix: str | None = None
        self._plan: dict[str, PromMetric | None] = {}  # key -> how it is exported
        self._owners: dict[tuple[str, str | None], str] = {}  # (name, site) -> its key
        self._metrics: dict[str, Any] = {}  # Prometheus name -> Ray metric object
        self._descriptions: dict[str, str] = dict(LEAK_DESCRIPTIONS)  # name -> its description
        self._last: dict[tuple[str, str], float] = {}  # counter (name, site) -> last cumulative
        self._sites: dict[str, list[str]] = {}  # culprit tag values admitted
        self._tagged: dict[str, dict[str, float]] = {}  # TAGGED name -> {tag: last value}
        self._gauges: dict[tuple[str, str], float] = {}  # (name, site) -> last value set
        self._leak_gauges: dict[tuple[str, str], float] = {}
        self.samples_written = 0
        self.closed = False

    def bind(self, prober: Any) -> RayMetricsSink:
        """Read declarations from ``prober`` (its ``describe``, else its probes')."""
        self.describe.prober = prober
        return self

    def retag(self, **tags: str) -> None:
        """Change this process's tags (a pooled task worker now runs another task).

        Every later value, and every gauge refreshed, carries the new tags; the
        series under the old ones is no longer recorded, and Ray's agent drops it.
        """
        unknown = sorted(set(tags) - set(TAG_KEYS))
        if unknown:
            raise ValueError(f"unknown tag(s) {unknown}; tags are {list(TAG_KEYS)}")
        with self._lock:
            self.tags.update({k: str(v) for k, v in tags.items()})
            for m in self._metrics.values():
                m.set_default_tags(self.tags)

    # -- Ray metric objects ------------------------------------------------------------
    def _metric(self, name: str, kind: str, description: str, extra: tuple[str, ...]) -> Any:
        m = self._metrics.get(name)
        if m is None:
            cls = self._ray_metrics.Counter if kind == "counter" else self._ray_metrics.Gauge
            description = description or self._descriptions.get(name) or name
            m = cls(name, description=description, tag_keys=TAG_KEYS + extra)
            m.set_default_tags(self.tags)
            self._metrics[name] = m
        return m

    def _plan_key(self, key: str) -> PromMetric | None:
        if self._prefix is None:
            return None
        try:
            parts = split_key(key, self._prefix)
        except ValueError:
            return None
        declared = self.describe(key, self._prefix)
        plan = prom_metric(parts.probe, parts.metric, declared)
        self._descriptions.setdefault(plan.name, declared.description)
        # Two keys with one name (gc's per-interval and cumulative seconds): the first wins.
        owner = self._owners.setdefault((plan.name, plan.site), key)
        return plan if owner == key else None

    def _site_tag(self, name: str, site: str) -> str:
        admitted = self._sites.setdefault(name, [])
        if site in admitted:
            return site
        if len(admitted) < self.max_sites:
            admitted.append(site)
            return site
        return "other"

    # -- Sink -------------------------------------------------------------------------
    def write(self, sample: Sample) -> None:
        """Record every value of ``sample``: gauges set, counters increased by their growth."""
        if self.closed:
            return
        with self._lock:
            if self._prefix is None:
                self._prefix = infer_prefix(sample.values)
                if self._prefix is None:
                    return  # not a Prober's sample: nothing to name its keys by
            gauges: dict[tuple[str, str], float] = {}
            by_site: dict[str, list[tuple[float, str]]] = {}  # name -> [(value, site)]
            for key, value in sample.values.items():
                plan = self._plan.get(key, False)
                if plan is False:
                    plan = self._plan[key] = self._plan_key(key)
                if plan is None:
                    continue
                if plan.site is not None:
                    if plan.kind == "counter":
                        continue  # no site metric is cumulative; a per-site counter is not kept
                    by_site.setdefault(plan.name, []).append((float(value), plan.site))
                elif plan.kind == "counter":
                    self._count(plan, "", float(value))
                else:
                    gauges[(plan.name, "")] = float(value)
            # This sample's top max_sites sites by value keep their tag; the rest are summed.
            for name, values in by_site.items():
                values.sort(key=lambda vs: -abs(vs[0]))
                for rank, (value, site) in enumerate(values):
                    if rank < self.max_sites and site != "other":
                        gauges[(name, site)] = value
                    else:
                        gauges[(name, "other")] = gauges.get((name, "other"), 0.0) + value
            self._set_gauges(gauges)
            self._gauges = {**self._leak_gauges, **gauges}
            self.samples_written += 1

    def _set_gauges(self, gauges: Mapping[tuple[str, str], float]) -> None:
        for (name, site), value in gauges.items():
            extra = ("site",) if site else ()
            m = self._metric(name, "gauge", "", extra)
            m.set(value, tags={"site": site} if site else None)

    def refresh(self) -> None:
        """Record every gauge's last value again.

        Ray's metrics agent drops a gauge not recorded for two report intervals
        (20 s by default): a process sampled less often than that calls this
        in between, so that its series stay continuous.
        """
        if self.closed:
            return
        with self._lock:
            self._set_gauges(self._gauges)
            for name, values in self._tagged.items():
                tag_key = TAGGED[name][0]
                m = self._metrics[name]
                for tag, value in values.items():
                    m.set(value, tags={tag_key: tag})

    def _count(self, plan: PromMetric, site: str, value: float) -> None:
        """An interval's amount, or a cumulative value's growth, added to a counter if > 0."""
        if plan.amount:
            increase = value
        else:
            slot = (plan.name, site)
            last = self._last.get(slot, 0.0)
            increase = value - last if value >= last else value  # below last: a reset
            self._last[slot] = value
        if increase > 0:
            extra = ("site",) if site else ()
            self._metric(plan.name, "counter", "", extra).inc(
                increase, tags={"site": site} if site else None
            )

    def write_alarm(self, alarm: Any) -> None:
        """Export a :class:`memprobe.LeakAlarm`'s state (a Prober's ``prober.alarm``): its
        confirmed keys (``alarm.alarmed``), the verdicts of its latest check, and the
        culprits those verdicts name (the alarm's deep capture puts its own first)."""
        latest = alarm.latest
        verdicts = {} if latest is None else dict(latest.verdicts)
        alarmed = list(alarm.alarmed)
        ranked = sorted((verdicts[k] for k in alarmed if k in verdicts),
                        key=lambda v: -(v.rate_per_hour or 0.0))
        culprits = [c for v in ranked for c in v.culprits]
        self.write_verdicts(verdicts, alarmed, culprits)

    def write_verdicts(self, verdicts: Mapping[str, Any], alarmed: Collection[str],
                       culprits: Sequence[str] = ()) -> None:
        """Export a leak alarm's state.

        - ``memprobe_leak_suspect``: 1 while ``alarmed`` (the keys the alarm has
          confirmed leaking) is not empty, else 0;
        - ``memprobe_leak_rate_per_hour_bytes``: the largest ``rate_per_hour`` in
          ``verdicts`` (the latest check's, by key) of an alarmed metric in bytes, else 0;
        - ``memprobe_leak_count_rate_per_hour{metric}``: the ``rate_per_hour`` of each
          alarmed metric that counts things (``process/num_fds``, ``objects/total_count``...;
          0 once no longer alarmed);
        - ``memprobe_leak_hours_to_oom``: the forecast hours to out-of-memory of a verdict
          in ``verdicts`` (``Verdict.hours_to_oom``: the resident size's), alarmed or not,
          else -1;
        - ``memprobe_leak_culprit_rank{culprit}``: 1 for the first of ``culprits`` (the
          likeliest), 0 once no longer named; at most :data:`MAX_CULPRITS` at a time and
          ``max_sites`` culprit values ever per process.

        An alarmed key with no verdict in ``verdicts`` counts in the suspect only.
        """
        if self.closed:
            return
        with self._lock:
            bytes_rate = 0.0
            counts: dict[str, float] = {}
            for key in alarmed:
                v = verdicts.get(key)
                if v is None:
                    continue
                rate = 0.0 if v.status == "insufficient" else float(v.rate_per_hour or 0.0)
                unit = self._unit(key, v)
                if unit == "bytes":
                    bytes_rate = max(bytes_rate, rate)
                elif unit == "count":
                    counts[v.metric] = rate
            hours = [float(h) for v in verdicts.values()
                     if (h := getattr(v, "hours_to_oom", None)) is not None]
            verdict = {("memprobe_leak_suspect", ""): 1.0 if alarmed else 0.0,
                       ("memprobe_leak_rate_per_hour_bytes", ""): bytes_rate,
                       ("memprobe_leak_hours_to_oom", ""): min(hours) if hours else -1.0}
            self._set_gauges(verdict)
            self._leak_gauges = verdict
            self._gauges.update(verdict)
            ranks: dict[str, int] = {}
            for c in culprits:
                if c not in ranks and len(ranks) < MAX_CULPRITS:
                    ranks[c] = len(ranks) + 1
            now: dict[str, float] = {}
            for culprit, rank in ranks.items():
                tag = self._site_tag(CULPRIT_RANK, culprit)
                if tag != "other" and tag not in now:
                    now[tag] = float(rank)
            self._set_tagged(CULPRIT_RANK, now)
            self._set_tagged(COUNT_RATE, counts)

    def _unit(self, key: str, verdict: Any) -> str:
        """The declared unit of a judged key."""
        return verdict.unit or self.describe(key, verdict.prefix).unit

    def _set_tagged(self, name: str, values: Mapping[str, float]) -> None:
        """Set a gauge with one tag (:data:`TAGGED`) per value; a value no longer given: 0."""
        old = self._tagged.get(name, {})
        if not values and not old:
            return
        tag_key, description = TAGGED[name]
        m = self._metric(name, "gauge", description, (tag_key,))
        merged = {**dict.fromkeys(old, 0.0), **values}
        for tag, value in merged.items():
            m.set(value, tags={tag_key: tag})
        self._tagged[name] = merged

    def close(self) -> None:
        """Stop exporting; Ray drops this process's series when the process ends."""
        self.closed = True
