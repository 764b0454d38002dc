"""A helper module of the user's, for rllib_field_envs.py: a dataclass and its factory,
as a project keeps its step records. The record's lists and dict are built here and
in the dataclass's generated ``__init__`` (compiled by the standard library as
``<string>``), not at the env's line that keeps them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepRecord:
    """One step as the user's code records it."""

    step: int
    obs: list[float]
    tags: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


def make_record(step: int, obs: Sequence[float]) -> StepRecord:
    """A record of ``step`` (about 2.3 KiB: the observation repeated 64 times, and the
    empty list and dict the generated ``__init__`` makes)."""
    return StepRecord(step, [float(x) for x in obs] * 64)  # FACTORY


def factory_line() -> str:
    """``rllib_field_helpers.py:<line>`` of the factory's line."""
    with open(__file__) as f:
        for n, line in enumerate(f, 1):
            if line.rstrip().endswith("# FACTORY"):
                return f"rllib_field_helpers.py:{n}"
    raise LookupError("FACTORY")
