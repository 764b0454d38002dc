"""From a process's samples to RLlib metrics: reduce kinds, and a key set that never leaves a NaN.

RLlib's ``MetricsLogger`` keeps every key it was ever given and reduces a key
that got no value in an iteration to NaN. So, once a key has been logged,
:class:`ResultLog` logs it at every flush: a gauge that got no value keeps its
latest one, a site or type that left the top N logs 0, counters log an
increase of 0 and intervals a sum of 0. The number of keys is bounded
(``max_keys``); the values are kept in per-key cells allocated once per key.

``leak/hours_to_oom`` is reduced to the minimum, not the mean, over the
EnvRunners (and a process's values in one iteration): the soonest kill is what
matters. A process with no forecast (-1) logs infinity, which the minimum
passes over; :func:`no_forecast_as_minus_one` turns an infinity left in the
results (no process had a forecast) back into -1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import memprobe
from memprobe import keys as mkeys
from memprobe import metrics as mmetrics

#: The key, under a process's prefix, reduced to the soonest forecast over processes.
HOURS_TO_OOM = "hours_to_oom"

# Cell layout: the latest value, the largest, the sum, the number of values
# since the last flush, and the value logged last (for counters: the total).
_LAST, _MAX, _SUM, _N, _PREV = range(5)


def declared(prober: Any, key: str) -> mmetrics.Metric:
    """The declaration of one of ``prober``'s keys (unit and kind)."""
    describe = getattr(prober, "describe", None)
    if describe is not None:
        return describe(key)  # type: ignore[no-any-return]
    parts = mkeys.split_key(key, prober.prefix)
    if parts.probe in mkeys.PROBER_SECTIONS:
        return mmetrics.lookup(mmetrics.PROBER_METRICS.get(parts.probe), parts.metric)
    try:
        probe = prober.probe(parts.probe)
    except Exception:
        probe = None
    return mmetrics.lookup(getattr(probe, "metrics", None), parts.metric)


class KeyKinds:
    """Each key's reduce kind and whether it gets a ``_max`` companion, looked up once."""

    def __init__(self, describe: Callable[[str], mmetrics.Metric], prefix: str) -> None:
        self._describe = describe
        self._prefix = prefix
        self._cache: dict[str, tuple[str, bool, bool]] = {}

    def __call__(self, key: str) -> tuple[str, bool, bool]:
        """``(kind, wants_max, is_site)`` of ``key``."""
        got = self._cache.get(key)
        if got is None:
            try:
                metric = self._describe(key)
                parts = mkeys.split_key(key, self._prefix)
                site = mkeys.site_name(parts.metric) is not None
                # The largest EnvRunner matters for process-level sizes and fds.
                wants_max = parts.probe == "process" and (
                    metric.unit == "bytes" or parts.metric == "num_fds")
                got = (metric.kind, wants_max and metric.kind == "gauge", site)
            except ValueError:  # a key the adapter adds itself (leak, errors)
                got = ("gauge", False, False)
            self._cache[key] = got
        return got


class ResultLog:
    """The values of the samples taken since the last flush, logged once per ``sample()``.

    Without ``site_keys`` the per-site and per-type keys stay out of the
    results (they are in the JSONL, and the leak keys name the culprits): the
    key set is then the same at every iteration.
    """

    def __init__(self, kinds: KeyKinds, *, site_keys: bool = False, max_keys: int = 2000) -> None:
        self.kinds = kinds
        self.site_keys = site_keys
        self.max_keys = max_keys
        self.cells: dict[str, list[float]] = {}
        self.dropped_keys = 0
        self.pending = False

    def add(self, values: Mapping[str, Any]) -> None:
        """Add one sample's values (never changes ``values``). Per-site and per-type keys
        (``top|growth|survivors/<name>/...``) are kept only with ``site_keys``."""
        cells = self.cells
        for k, v in values.items():
            cell = cells.get(k)
            if cell is None:
                if not self.site_keys and self.kinds(k)[2]:
                    continue
                if len(cells) >= self.max_keys:
                    self.dropped_keys += 1
                    continue
                cells[k] = cell = [0.0, v, 0.0, 0, 0.0]
            if cell[_N]:
                if v > cell[_MAX]:
                    cell[_MAX] = v
                cell[_SUM] += v
            else:
                cell[_MAX] = v
                cell[_SUM] = v
            cell[_LAST] = v
            cell[_N] += 1
        self.pending = True

    def flush(self, metrics_logger: Any) -> None:
        """Log every key seen so far (see the module docstring), then start again."""
        kinds = self.kinds
        log = metrics_logger.log_value
        for key, cell in self.cells.items():
            kind, wants_max, site = kinds(key)
            fresh = cell[_N] > 0
            if kind == "gauge":
                if not fresh and site:
                    cell[_LAST] = cell[_MAX] = 0.0
                if mkeys.is_leak_key(key, HOURS_TO_OOM):
                    hours = cell[_LAST]
                    log(key, hours if hours >= 0 else math.inf, reduce="min")
                else:
                    log(key, cell[_LAST], reduce="mean")
                if wants_max:
                    log(key + "_max", cell[_MAX] if fresh else cell[_LAST], reduce="max")
            elif kind == "counter":
                log(key, (cell[_LAST] - cell[_PREV]) if fresh else 0.0, reduce="lifetime_sum")
                cell[_PREV] = cell[_LAST]
            else:
                log(key, cell[_SUM] if fresh else 0.0, reduce="sum")
            cell[_N] = 0
        self.pending = False

    def flush_custom_metrics(self, custom_metrics: dict[str, Any]) -> None:
        """Old API stack: the values into ``episode.custom_metrics`` (RLlib adds _mean, _max...)."""
        for key, cell in self.cells.items():
            if cell[_N]:
                kind = self.kinds(key)[0]
                custom_metrics[key] = cell[_SUM] if kind == "interval" else cell[_LAST]
            cell[_N] = 0
        self.pending = False


def no_forecast_as_minus_one(results: Any) -> None:
    """In RLlib's ``results`` (an EnvRunners' section), the ``leak/hours_to_oom`` keys
    left infinite by the minimum (no EnvRunner had a forecast) set back to -1."""
    if not isinstance(results, dict):
        return
    for key, value in results.items():
        if (mkeys.is_leak_key(key, HOURS_TO_OOM) and isinstance(value, (int, float))
                and math.isinf(value)):
            results[key] = -1.0


def warn(message: str, category: type[Warning] = memprobe.MemprobeWarning) -> None:
    """Warn, never raising: a warnings filter set to "error" must not break training."""
    import warnings

    try:
        warnings.warn(message, category, stacklevel=3)
    except Exception:
        pass
