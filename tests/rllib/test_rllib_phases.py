"""Phase markers in RLlib, with real Ray and a real PPO run with evaluation."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("ray.rllib")

import memprobe
from memprobe_rllib import MemoryProbeCallback

pytestmark = pytest.mark.rllib


def lines_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_train_evaluate_and_user_marks_in_jsonl_and_report(ray_session, tmp_path):
    from ray.rllib.algorithms.ppo import PPOConfig

    cls = MemoryProbeCallback.configure(jsonl=str(tmp_path))
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
        .evaluation(evaluation_interval=1, evaluation_num_env_runners=1,
                    evaluation_duration=1, evaluation_duration_unit="episodes")
        .callbacks(cls)
        .debugging(log_level="ERROR")
    )
    algo = config.build_algo()
    try:
        algo.train()
        assert MemoryProbeCallback.mark("between_iterations") >= 1
        algo.train()
        with pytest.raises(memprobe.ConfigError, match="label"):
            MemoryProbeCallback.mark("a/b")
    finally:
        algo.stop()

    files = {f: lines_of(f) for f in tmp_path.glob("memprobe-*.jsonl")}
    driver = next(lines for lines in files.values() if lines[0]["role"] == "driver")
    assert driver[0].get("phase") == "train" and driver[0].get("phase_edge") == "start"
    phases = [rec.get("phase") for rec in driver]
    assert "train/evaluate" in phases, phases
    edges = [(rec.get("phase"), rec.get("phase_edge")) for rec in driver if "phase_edge" in rec]
    # Two evaluations, each one span inside training.
    assert edges.count(("train/evaluate", "start")) == 2, edges
    assert edges.count(("train/evaluate", "end")) == 2, edges
    assert [rec["mark"] for rec in driver if "mark" in rec] == ["between_iterations"]

    # The evaluation EnvRunner's samples are all in the "evaluate" phase; the
    # training EnvRunner's in none.
    runners = [lines for lines in files.values() if lines[0]["role"] == "env_runner"]
    in_eval = [lines for lines in runners if lines[0].get("phase") == "evaluate"]
    assert len(in_eval) == 1 and all(rec.get("phase") == "evaluate" for rec in in_eval[0])
    assert any(all("phase" not in rec for rec in lines) for lines in runners)

    driver_file = next(f for f, lines in files.items() if lines[0]["role"] == "driver")
    r = subprocess.run([sys.executable, "-m", "memprobe", "report", str(driver_file)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "growth per phase" in r.stdout, r.stdout
    table = r.stdout.split("growth per phase", 1)[1]
    assert "train/evaluate" in table and "train" in table.replace("train/evaluate", ""), table


def test_restoring_a_checkpoint_marks_checkpoint_loaded(ray_session, tmp_path):
    """A real PPO saved with ``save_to_path`` and restored with ``algo.restore(path)``
    (the Trainable API, which calls ``on_checkpoint_loaded``): the driver's JSONL has
    the ``checkpoint_loaded`` mark, after the restored Algorithm's ``train`` start."""
    from ray.rllib.algorithms.ppo import PPOConfig

    cls = MemoryProbeCallback.configure(jsonl=str(tmp_path / "runs"), learners=False)
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
        .callbacks(cls)
        .debugging(log_level="ERROR")
    )
    checkpoint = tmp_path / "checkpoint"
    algo = config.build_algo()
    try:
        algo.train()
        algo.save_to_path(str(checkpoint))
    finally:
        algo.stop()
    restored = config.build_algo()
    try:
        restored.restore(str(checkpoint))
        restored.train()
    finally:
        restored.stop()

    driver = [rec for f in sorted((tmp_path / "runs").glob("memprobe-driver-*.jsonl"))
              for rec in lines_of(f)]
    marks = [rec["mark"] for rec in driver if "mark" in rec]
    assert marks == ["checkpoint_loaded"], marks
    starts = [i for i, rec in enumerate(driver) if rec.get("phase_edge") == "start"
              and rec.get("phase") == "train"]
    loaded = next(i for i, rec in enumerate(driver) if rec.get("mark") == "checkpoint_loaded")
    assert len(starts) == 2 and starts[1] < loaded, (starts, loaded)
