"""The ``step`` given to ``prober.sample()``: what is accepted, and what a bad one costs.

An ML loop passes numpy ints (``np.int64``), tensors' ``.item()``, or a time in
seconds as its step. Any integer with ``__index__`` is taken as an ``int``; a
finite float (``np.float64`` included) is taken as a float, or as an ``int``
when it is whole. A bool, a step outside 64 bits, a float that is not finite,
or anything else is refused without breaking the caller's loop: the sample is
taken with no step, counted in ``<prefix>/errors/step``, and a
:class:`memprobe.ProbeFailedWarning` gives the value, once per Prober.
"""

from __future__ import annotations

import math
import operator
import warnings
from typing import Any

from .._errors import ProbeFailedWarning, show
from ..keys import make_key

__all__ = ["INT64", "StepCheck"]

#: Steps are ints within 64 bits: ``-INT64 <= step < INT64``.
INT64 = 2**63
_INT64 = INT64
#: The name of the count in ``<prefix>/errors/``.
ERRORS_NAME = "step"


class StepCheck:
    """Turns a step that is not an ``int`` into one (or a float), or refuses it.

    :param errors: the Prober's failure counts by name (``<prefix>/errors/<name>``).
    """

    def __init__(self, errors: dict[str, int], prefix: str) -> None:
        self._errors = errors
        self._prefix = prefix

    def __call__(self, step: Any) -> int | float | None:
        """``step`` as an int or a float; None (counted and warned) when it is refused."""
        why = _refused(step)
        if why is None:
            if isinstance(step, float) or not hasattr(step, "__index__"):
                f = float(step)
                return int(f) if f.is_integer() and -_INT64 <= f < _INT64 else f
            return operator.index(step)
        first = ERRORS_NAME not in self._errors
        self._errors[ERRORS_NAME] = self._errors.get(ERRORS_NAME, 0) + 1
        if first:
            warnings.warn(
                f"memprobe: prober.sample(step={show(step)}): the step {why}; the sample is "
                f"taken without a step, counted in "
                f"{make_key(self._prefix, 'errors', ERRORS_NAME)}", ProbeFailedWarning,
                stacklevel=3)
        return None


def _refused(step: Any) -> str | None:
    """Why ``step`` cannot be a step, or None."""
    if isinstance(step, bool) or type(step).__name__ in ("bool", "bool_"):  # numpy.bool_ too
        return "is a bool, not a number (pass an int, or a float time)"
    if hasattr(step, "__index__") and not isinstance(step, float):
        try:
            n = operator.index(step)
        except Exception as exc:
            return f"has an __index__ that failed ({type(exc).__name__})"
        if not -_INT64 <= n < _INT64:
            return "is outside the 64-bit range"
        return None
    if isinstance(step, float) or _has_float(step):
        try:
            f = float(step)
        except Exception as exc:
            return f"cannot be read as a float ({type(exc).__name__})"
        if not math.isfinite(f):
            return "is not a finite number"
        return None
    return f"must be an int (or a float time), got {type(step).__name__}"


def _has_float(step: Any) -> bool:
    """A numpy float that is no ``float`` subclass (``np.float32``), or a 0-d array."""
    return hasattr(step, "__float__") and not isinstance(step, (str, bytes, complex))
