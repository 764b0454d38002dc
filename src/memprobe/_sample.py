"""The record of one sample: the type every other module passes around."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Union

#: A metric value: a finite int (64-bit range) or float.
Number = Union[int, float]


@dataclass(frozen=True)
class Sample:
    """One sample: when (unix seconds), at which step, in which process, the flat values.

    ``values`` maps flat keys (``memprobe/<probe>/<metric>``, see :mod:`memprobe.keys`)
    to numbers. It is read-only for everyone but the Prober that made it.
    ``labels`` holds the phase markers of the sample (``{"phase": "eval"}``,
    ``{"mark": "checkpoint"}``: see ``Prober.mark``), the referrer chains of a leak
    alarm's capture line (``{"holders": "chain\\nchain"}``), or None.
    """

    time_seconds: float
    step: int | None
    pid: int
    values: Mapping[str, Number]
    labels: Mapping[str, str] | None = None
