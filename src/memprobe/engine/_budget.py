"""A Prober's overhead budget, split among its probes.

The budget is a fraction of wall time that all probes together may take. It is
split max-min fairly: a probe that would take less than an equal part of what is
left gets all it would take and runs whenever its schedule lets it; what it leaves
is split among the costly ones. So a cheap probe (``process``, a few µs) never
holds back a costly one (``gc`` with ``blocks=True``, ``objects``) by keeping a
part it does not use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class _Costed(Protocol):
    cost_seconds: float
    disabled: bool
    every: int
    interval_seconds: float


def fair_share(budget: float, demands: Sequence[float]) -> float:
    """The share of ``budget`` each of probes taking ``demands`` of wall time
    unthrottled may take: the max-min fair level.

    In increasing demand, each probe is offered an equal part of the budget still
    left and charged what it takes of it. The parts never shrink, and once one probe
    needs more than its part, every later one does and gets the same part: that part
    is the level. A probe that needs less is not held back by it.

    :returns: the level ``L``: what the probes take, ``sum(min(d, L))``, is at most
        ``budget``, and all of it when ``sum(demands)`` exceeds it; ``L`` is at least
        ``budget / len(demands)``.
    """
    left = budget
    part = budget
    n = len(demands)
    for pos, d in enumerate(sorted(demands)):
        part = left / (n - pos)
        left -= min(d, part)
    return part


class BudgetSplit:
    """The share of one Prober's probes (:func:`fair_share`), renewed every
    ``RENEW_CALLS`` samples from each probe's moving-average cost and the
    moving-average time between samples."""

    RENEW_CALLS = 16

    __slots__ = ("_budget", "_last_time", "_period_seconds", "_share", "_until_renew")

    def __init__(self) -> None:
        self._budget = 0.0
        self._last_time: float | None = None
        self._period_seconds = 0.0
        self._share = 0.0
        self._until_renew = 0

    def share(self, now: float, budget: float, probes: Sequence[_Costed]) -> float:
        """A probe's share of ``budget`` for a sample at ``now`` (``perf_counter``)."""
        last, self._last_time = self._last_time, now
        if last is not None:
            dt = now - last
            avg = self._period_seconds
            self._period_seconds = 0.8 * avg + 0.2 * dt if avg else dt
        self._until_renew -= 1
        if self._until_renew <= 0 or budget != self._budget:
            self._until_renew = self.RENEW_CALLS
            self._budget = budget
            period = self._period_seconds
            demands = [
                _demand(p.cost_seconds, max(p.every * period, p.interval_seconds))
                for p in probes
                if not p.disabled  # a disabled probe takes no part
            ]
            self._share = fair_share(budget, demands)
        return self._share


def _demand(cost_seconds: float, period_seconds: float) -> float:
    """The fraction of wall time a probe costing ``cost_seconds`` takes run every
    ``period_seconds``: none before its first run, all it could take while the time
    between samples is not known yet."""
    if not cost_seconds:
        return 0.0
    if period_seconds <= 0.0:
        return float("inf")
    return cost_seconds / period_seconds
