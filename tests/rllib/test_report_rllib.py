"""`memprobe report` on the files of a real RLlib run (PPO, one remote EnvRunner): the
driver's file (keys under memprobe/driver/) and the EnvRunner's, each labelled by its tags."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray.rllib")

pytestmark = [pytest.mark.rllib, pytest.mark.slow]


def test_report_reads_driver_and_env_runner_files(ray_session, tmp_path: Path) -> None:
    from ray.rllib.algorithms.ppo import PPOConfig

    from memprobe_rllib import MemoryProbeCallback

    cls = MemoryProbeCallback.configure(jsonl=str(tmp_path))
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .training(train_batch_size=256, minibatch_size=64, num_epochs=1)
        .debugging(log_level="ERROR")
        .callbacks(cls)
    )
    algo = config.build_algo()
    try:
        for _ in range(2):
            algo.train()
    finally:
        algo.stop()
    files = sorted(str(p) for p in tmp_path.glob("memprobe-*.jsonl"))
    assert len(files) >= 2, files
    res = subprocess.run([sys.executable, "-m", "memprobe", "report", *files],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    sections = res.stdout.split("== ")[1:]
    driver = [s for s in sections if "role=driver" in s.splitlines()[0]]
    runner = [s for s in sections if "role=env_runner, env_runner=1" in s.splitlines()[0]]
    assert driver and runner, res.stdout
    for section in (driver[0], runner[0]):
        rss = next(line for line in section.splitlines() if "process/rss_bytes" in line)
        assert "MiB" in rss or "GiB" in rss, section  # the rows are there, in their unit
