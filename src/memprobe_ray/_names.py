"""Prometheus names for memprobe keys: one metric name per declared metric, sites as a tag.

A key ``<prefix>/<probe>/<metric>`` becomes ``memprobe_<probe>_<metric>`` with
``/`` and every character Prometheus refuses turned into ``_``. The unit and the
kind come from the metric's declaration (:class:`memprobe.metrics.Metric`), never
from the name:

- a ``gauge`` is a Prometheus gauge; a count-like gauge never ends in ``_count``,
  ``_sum`` or ``_bucket`` (those suffixes belong to histograms and summaries):
  ``blocks_count`` becomes ``blocks``, a bare ``count`` becomes ``items``; a
  gauge whose name would still end in one of them or in ``_total`` (a counter's)
  gets ``_value``: ``objects/total_count`` is ``memprobe_objects_total_value``;
- a ``counter`` is a Prometheus counter named ``..._total``;
- an ``interval`` in seconds (time spent since the previous sample) is summed
  into a counter ``..._seconds_total``, so that ``rate()`` gives the fraction
  of time spent; any other interval (growth since the previous sample, which
  may be negative) is a gauge of its last value.

The unit is in the name: ``_bytes``, ``_seconds``, ``_ratio`` for a fraction.
A site or type key (``top/<site>/size_bytes``) is named without its site
(``memprobe_tracemalloc_top_size_bytes``); the site is the ``site`` tag.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

from memprobe.keys import metric_path, site_name
from memprobe.metrics import Metric

#: The Prometheus type a memprobe metric is exported as.
PromKind = Literal["gauge", "counter"]

_BAD = re.compile(r"[^a-zA-Z0-9_]+")
#: Suffixes a gauge never ends in: histograms' and summaries' series, and counters'.
_NOT_GAUGE_SUFFIXES = ("_count", "_sum", "_bucket", "_total")
_UNIT_SUFFIX = {"bytes": "_bytes", "seconds": "_seconds", "fraction": "_ratio"}


class PromMetric(NamedTuple):
    """How one memprobe metric is exported.

    ``amount`` is true for a counter fed each sample's value (an interval's
    amount) rather than each sample's growth (a cumulative counter's).
    """

    name: str
    kind: PromKind
    site: str | None
    amount: bool = False


def _clean(text: str) -> str:
    out = _BAD.sub("_", text).strip("_")
    return re.sub("_{2,}", "_", out)


def _with_unit(name: str, unit: str) -> str:
    if unit == "fraction":
        if name.endswith("_fraction"):
            return name[: -len("_fraction")] + "_ratio"
        return name if name.endswith("_ratio") else name + "_ratio"
    suffix = _UNIT_SUFFIX.get(unit)
    if suffix is None or name.endswith(suffix):
        return name
    return name + suffix


def prom_metric(probe: str, metric: str, declared: Metric) -> PromMetric:
    """The Prometheus name and kind of ``<probe>/<metric>`` declared as ``declared``.

    ```pycon
    >>> from memprobe.metrics import Metric
    >>> prom_metric("process", "rss_bytes", Metric("rss", "bytes"))[:3]
    ('memprobe_process_rss_bytes', 'gauge', None)
    >>> prom_metric("tracemalloc", "top/a.py:3/count", Metric("blocks", "count"))[:3]
    ('memprobe_tracemalloc_top_items', 'gauge', 'a.py:3')
    >>> prom_metric("errors", "gc", Metric("failures", "count", "counter"))[:3]
    ('memprobe_errors_gc_total', 'counter', None)

    ```
    """
    site = site_name(metric)
    parts = metric_path(metric)
    if site is not None:
        parts = [parts[0], parts[-1]]
    kind: PromKind = "gauge"
    if declared.kind == "counter" or (declared.kind == "interval" and declared.unit == "seconds"):
        kind = "counter"
    last = parts[-1]
    if last.endswith("_total"):
        last = last[: -len("_total")]
    if kind == "counter" or declared.unit == "count":
        if last == "count":
            last = "items"
        elif last.endswith("_count"):
            last = last[: -len("_count")]
    name = "memprobe_" + (_clean("_".join([probe, *parts[:-1], last])) or "metric")
    if kind == "gauge" and name.endswith(_NOT_GAUGE_SUFFIXES):
        name += "_value"
    name = _with_unit(name, declared.unit)
    if kind == "counter":
        name += "_total"
    return PromMetric(name, kind, site, kind == "counter" and declared.kind == "interval")
