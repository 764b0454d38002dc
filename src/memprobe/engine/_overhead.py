"""What sampling costs, as a sample's ``overhead/`` values: the sample's time and, over a
window from the end of the first sample, the fraction of wall time the probes took."""

from __future__ import annotations

from .._sample import Number
from ..keys import make_key

#: ``overhead/fraction`` is reported once the window it is measured over (from the
#: end of the first sample) is at least this long: before, it means nothing.
FRACTION_WINDOW_SECONDS = 1.0


class Overhead:
    """The overhead metrics of one Prober's samples (``perf_counter`` times)."""

    __slots__ = ("_key_fraction", "_key_sample_seconds", "_probe_seconds", "_t_first")

    def __init__(self, prefix: str) -> None:
        self._key_sample_seconds = make_key(prefix, "overhead", "sample_seconds")
        self._key_fraction = make_key(prefix, "overhead", "fraction")
        self.reset()

    def reset(self) -> None:
        """Start a new window (a forked child measures its own samples only)."""
        self._t_first = 0.0  # the end of the first sample, or 0 before it
        self._probe_seconds = 0.0  # the probes' time since then

    def probes_ran(self, t0: float, t1: float) -> None:
        """The probes ran from ``t0`` to ``t1``: their time joins the window."""
        if self._t_first:
            self._probe_seconds += t1 - t0

    def add_values(self, values: dict[str, Number], t0: float, t3: float) -> None:
        """Add ``overhead/sample_seconds`` (the sample took ``t0`` to ``t3``) and, once the
        window is long enough, ``overhead/fraction``."""
        values[self._key_sample_seconds] = t3 - t0
        if self._t_first:
            window = t3 - self._t_first
            if window >= FRACTION_WINDOW_SECONDS:
                values[self._key_fraction] = self._probe_seconds / window
        else:
            self._t_first = t3
