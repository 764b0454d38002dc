"""What a forked child renews: the objects that asked to be told, in the child, that it
is one (a Prober's lock, history and alarm are the parent's until then)."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable

# The renewing methods, held weakly: an object nobody holds is not kept for this.
_RENEWALS: weakref.WeakKeyDictionary[object, Callable[[object], None]] = (
    weakref.WeakKeyDictionary())


def renew_in_child(obj: object, renew: Callable[[object], None]) -> None:
    """Call ``renew(obj)`` in each child forked from now on, while ``obj`` lives."""
    _RENEWALS[obj] = renew


def _after_fork_in_child() -> None:
    for obj, renew in list(_RENEWALS.items()):
        renew(obj)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
