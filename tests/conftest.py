"""Shared fixtures. ``ray_session``: one Ray instance for the whole test session.

Every test is also checked for memprobe state left behind in this process: a
gc callback of a probe that was never stopped, or tracing memprobe started and
never stopped. RLlib has no hook at ``Algorithm.stop()``, so a callback's
Probers are never stopped: they clean up when collected, which RLlib tests
check after a ``gc.collect()``.
"""

from __future__ import annotations

import gc
import os
import pathlib

import pytest
from hypothesis import HealthCheck, settings

# Wall-clock deadlines fail at random on a shared 2-core machine (a first run that
# imports or compiles takes 100x the next); the laws are what the property tests check.
settings.register_profile(
    "memprobe", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("memprobe")

RLLIB_TESTS = pathlib.Path(__file__).parent / "rllib"


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray (2 CPUs, no dashboard) shared by all RLlib tests; EnvRunners can
    import the helper modules under tests/rllib (e.g. test plugins)."""
    ray = pytest.importorskip("ray")
    path = os.pathsep.join(p for p in (str(RLLIB_TESTS), os.environ.get("PYTHONPATH")) if p)
    # address="local": a new instance, never a cluster some other program left running.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield ray
    ray.shutdown()


def _memprobe_gc_callbacks() -> list:
    return [cb for cb in gc.callbacks if getattr(cb, "__module__", "").startswith("memprobe")]


@pytest.fixture(autouse=True)
def _no_memprobe_state_left(request):
    """Fail a test that leaves a memprobe gc callback installed or memprobe's tracing on."""
    from memprobe import _tracing as tm_probe

    callbacks = _memprobe_gc_callbacks()
    users = tm_probe._users
    yield
    if request.node.get_closest_marker("rllib") is not None:
        gc.collect()  # the stopped Algorithm's callbacks, and their Probers
    left = [cb for cb in _memprobe_gc_callbacks() if cb not in callbacks]
    tracing = tm_probe._users - users
    for cb in left:  # clean up, so one leaky test does not fail the next ones
        gc.callbacks.remove(cb)
    for _ in range(tracing):
        tm_probe.release_tracing()
    problems = []
    if left:
        problems.append(f"{len(left)} gc callback(s) of a memprobe probe left installed: {left}")
    if tracing:
        problems.append(f"memprobe tracemalloc users left: {tracing} (a Prober not stopped)")
    if problems:
        pytest.fail("; ".join(problems) + "; stop() every Prober a test starts", pytrace=False)


@pytest.fixture
def fresh_heap():
    """Give the heap's free pages back to the kernel (glibc ``malloc_trim(0)``) first.

    A test that judges its own process's rss by allocating in it needs those allocations
    to fault in new pages. After hundreds of tests the heap holds resident free memory
    that an allocation would reuse without rss moving.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to give back this way
    gc.collect()



@pytest.fixture
def rare_full_collections():
    """The oldest generation collected never by itself, as in a heap of millions of
    objects; young ones as usual. Restored after, with one full collection."""
    old = gc.get_threshold()
    gc.collect()
    gc.set_threshold(old[0], old[1], 10**9)
    yield
    gc.set_threshold(*old)
    gc.collect()
