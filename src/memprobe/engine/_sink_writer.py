"""The one place a Prober writes to its sinks, and closes them."""

from __future__ import annotations

import warnings

from .._errors import ProbeFailedWarning
from .._sample import Sample
from ._hooks import SampleHooks
from ._sinks import Sink


class SinkWriter:
    """A Prober's sinks, by name (``"sink"`` for ``sink=``, else the registered name).

    A failure of a sink's ``write`` (``sys.exit()`` included) is counted under
    ``<prefix>/errors/<name>`` and warned about once, through the Prober's
    :class:`SampleHooks`; it never reaches the caller.
    """

    def __init__(self, sinks: list[tuple[str, Sink]], hooks: SampleHooks) -> None:
        self.named = sinks
        self._hooks = hooks

    def __bool__(self) -> bool:
        return bool(self.named)

    def write(self, sample: Sample) -> None:
        """Write ``sample`` to every sink, in order."""
        for name, s in self.named:
            self._hooks.current = name  # a sink that calls prober.sample() is named
            try:
                s.write(sample)
            except (Exception, SystemExit) as exc:  # a user's sink, its sys.exit() too
                self._hooks.failed(name, "write", exc)
            finally:
                self._hooks.current = None

    def close(self) -> None:
        """Close every sink; a failure is warned about, and the others are closed."""
        for name, s in self.named:
            try:
                s.close()
            except Exception as exc:  # a user's sink
                which = "the sink" if name == "sink" else f"the sink {name!r}"
                warnings.warn(f"memprobe: closing {which} failed: {exc!r}",
                              ProbeFailedWarning, stacklevel=3)
