"""Shared fixtures. ``ray_session``: one Ray instance for the whole test session."""

from __future__ import annotations

import os
import pathlib

import pytest

RLLIB_TESTS = pathlib.Path(__file__).parent / "rllib"


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray (2 CPUs, no dashboard) shared by all RLlib tests; EnvRunners can
    import the helper modules under tests/rllib (e.g. test plugins)."""
    ray = pytest.importorskip("ray")
    path = os.pathsep.join(p for p in (str(RLLIB_TESTS), os.environ.get("PYTHONPATH")) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield ray
    ray.shutdown()
