"""Issue 24, fault 1: PPO with ``diagnose=True`` and an env that keeps numpy arrays. The
live culprit keys, ``memprobe report`` on the EnvRunner's JSONL and ``check_rllib_leaks``
name the user's line above numpy's, and the kind is python, never native."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("ray.rllib")

from test_rllib_live import alarmed, ppo, run_until

from memprobe_rllib import MemoryProbeCallback

pytestmark = pytest.mark.rllib


def test_a_numpy_leak_in_diagnose_mode_names_the_users_line(ray_session, tmp_path):
    from memprobe_test_leaky_env import NUMPY_LEAKED, NumpyLeakyCartPole, numpy_leak_line

    cls = MemoryProbeCallback.configure(diagnose=True, learners=False, jsonl=str(tmp_path))
    line = numpy_leak_line()
    # The alarm waits for the growth to last 1.5 times the scale it was first judged on
    # (at most 128 samples; docs/leaks.md): iteration 8-12 in runs here, so up to 20.
    results = run_until(ppo(NumpyLeakyCartPole, cls), 20, lambda r: alarmed(r, line, "numpy"))
    NUMPY_LEAKED.clear()
    er = results[-1]["env_runners"]
    culprits = [k for k in er if k.startswith("memprobe/leak/culprit/")]
    assert alarmed(results[-1], line, "numpy"), (len(results), culprits)
    assert not any(k.startswith("memprobe/leak/culprit/native") for k in culprits), culprits
    runner = [str(f) for f in tmp_path.glob("memprobe-*.jsonl") if "env_runner" in f.name]
    res = subprocess.run([sys.executable, "-m", "memprobe", "report", *runner],
                         capture_output=True, text=True, timeout=120)
    assert f"{line} → numpy/" in res.stdout, res.stdout
    assert "native memory" not in res.stdout, res.stdout
