"""memprobe in RLlib's Learner actors: one :class:`ProcessProber` per process and option
set, sampled from the driver through ``foreach_learner``."""

from __future__ import annotations

import threading
from typing import Any

from memprobe import keys as mkeys

from ._options import CallbackOptions
from ._process import STEP_NAMES, ProcessProber
from ._results import warn

__all__ = ["LEARNER_PREFIX", "learner_prefix", "learner_sample"]

#: The prefix a Learner's Prober writes under; the driver renames it ``memprobe/learner_<i>``.
LEARNER_PREFIX = mkeys.join_prefix(mkeys.DEFAULT_PREFIX, "learner")


def learner_prefix(index: int) -> str:
    """The prefix of Learner ``index``'s keys in the driver's results: ``memprobe/learner_<i>``."""
    return mkeys.join_prefix(mkeys.DEFAULT_PREFIX, f"learner_{index}")

# Learner actors: one ProcessProber per process per option set, kept between iterations.
LEARNERS: dict[str, ProcessProber] = {}
LEARNER_LOCK = threading.Lock()


def learner_index(learner: Any) -> int:
    """The Learner's rank among the Learners (0 when it runs alone)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    return 0


def learner_sample(learner: Any, options: CallbackOptions,
                    step: Any = None) -> tuple[int, dict[str, Any]]:
    index = learner_index(learner)
    try:
        with LEARNER_LOCK:
            probe = LEARNERS.get(repr(options))
            if probe is None:
                probe = ProcessProber(options, "learner", index, prefix=LEARNER_PREFIX,
                                     step_name=STEP_NAMES["learner"]).start()
                LEARNERS[repr(options)] = probe
        return index, probe.sample_all(step)
    except Exception as exc:
        warn(f"memprobe_rllib: sampling in a Learner failed: {exc!r}")
        return index, {mkeys.make_key(LEARNER_PREFIX, "errors", "memprobe_rllib"): 1}
