"""Ray Train, Tune and Data, probed through the one-line setup hook alone."""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

SEEN = "last_over_time(ray_memprobe_process_rss_bytes{{name={name}}}[10m])"


def _names(prometheus, selector: str) -> list[dict]:
    return [r["metric"] for r in prometheus.query(SEEN.format(name=selector))]


def test_torch_trainer_workers_are_probed(ray_cluster, prometheus, tmp_path):
    pytest.importorskip("torch")
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    def train_loop(config: dict) -> None:
        import torch

        model = torch.nn.Linear(4, 1)
        for _ in range(30):
            model(torch.randn(8, 4)).sum().backward()
            time.sleep(0.1)

    trainer = TorchTrainer(
        train_loop,
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        run_config=RunConfig(storage_path=str(tmp_path), name="memprobe_train"),
    )
    trainer.fit()
    found = prometheus.wait_for(SEEN.format(name='"RayTrainWorker"'), lambda r: len(r) >= 2)
    assert {m["metric"]["role"] for m in found} == {"actor"}


def test_tune_trials_are_probed(ray_cluster, prometheus, tmp_path):
    from ray import tune

    def trial(config: dict) -> dict:
        time.sleep(3)
        return {"score": config["x"]}

    tuner = tune.Tuner(
        trial,
        param_space={"x": tune.grid_search([1, 2])},
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="memprobe_tune"),
    )
    results = tuner.fit()
    assert len(results) == 2 and not results.errors
    found = prometheus.wait_for(SEEN.format(name='"ImplicitFunc"'), lambda r: len(r) >= 2)
    assert {m["metric"]["role"] for m in found} == {"actor"}


def test_data_map_batches_tasks_are_probed(ray_cluster, prometheus):
    import ray.data

    def slow_double(batch: dict) -> dict:
        # Long enough to be sampled, exported by the node's agent and scraped while the
        # worker still runs the task (its process title names it), even on a busy box.
        time.sleep(8)
        return {"id": batch["id"] * 2}

    ds = ray.data.range(64, override_num_blocks=4).map_batches(slow_double, batch_size=16)
    assert sorted(r["id"] for r in ds.take_all()) == [2 * i for i in range(64)]
    found = prometheus.wait_for(SEEN.format(name='~".*MapBatches.*"'), lambda r: len(r) >= 1)
    assert {m["metric"]["role"] for m in found} == {"task"}
