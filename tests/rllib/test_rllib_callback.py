"""MemoryProbeCallback with real Ray and real RLlib (PPO on CartPole-v1)."""

from __future__ import annotations

import glob
import json
import re

import pytest

pytest.importorskip("ray.rllib")

import memprobe
from memprobe_rllib import MemoryProbeCallback, episode_end_callback

pytestmark = pytest.mark.rllib
RSS = "memprobe/process/rss_bytes"
COUNTER = "memprobe/gc/gen0/collections_count"


def ppo_config(num_env_runners, callbacks=MemoryProbeCallback, old_stack=False, **cb):
    from ray.rllib.algorithms.ppo import PPOConfig

    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=num_env_runners)
        .training(train_batch_size=256, minibatch_size=64, num_epochs=1)
        .debugging(log_level="ERROR")
    )
    if old_stack:
        config = config.api_stack(
            enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False
        )
    if callbacks is not None:
        config = config.callbacks(callbacks, **cb)
    elif cb:
        config = config.callbacks(**cb)
    return config


def train(config, iterations=2):
    algo = config.build_algo()
    try:
        return [algo.train() for _ in range(iterations)]
    finally:
        algo.stop()


@pytest.mark.parametrize("num_env_runners", [0, 1])
def test_new_stack_metrics_land_in_results(ray_session, num_env_runners, tmp_path):
    cls = MemoryProbeCallback.configure(jsonl=str(tmp_path))
    ray_session.put(ppo_config(num_env_runners, cls))  # picklable for remote EnvRunners
    results = train(ppo_config(num_env_runners, cls))
    counters = []
    for r in results:
        er = r["env_runners"]
        assert er[RSS] > 10 * 2**20
        # the max over this iteration's samples of one process: at least their mean,
        # and not a sum over samples or processes (which would be many times it)
        assert er[RSS] * 0.999 <= er[RSS + "_max"] <= er[RSS] * 1.5, (er[RSS], er[RSS + "_max"])
        assert er["memprobe/process/num_fds"] > 0
        counters.append(er[COUNTER])
        assert r["memprobe/driver/process/rss_bytes"] > 10 * 2**20
        assert "memprobe/driver/gc/gen0/count" in r
    assert counters == sorted(counters) and counters[0] > 0
    files = sorted(tmp_path.glob("memprobe-*.jsonl"))
    roles = set()
    for f in files:
        lines = [json.loads(line) for line in f.read_text().splitlines()]
        assert lines and all(RSS in rec["values"] or "memprobe/driver/process/rss_bytes"
                             in rec["values"] for rec in lines)
        roles.add((lines[0]["role"], lines[0].get("env_runner")))
    expected = {("driver", None), ("env_runner", num_env_runners and 1)}
    assert expected <= roles, roles


def test_old_stack_custom_metrics(ray_session):
    results = train(ppo_config(1, old_stack=True))
    for r in results:
        cm = r["env_runners"]["custom_metrics"]
        assert cm[RSS + "_mean"] > 10 * 2**20
        low, mean, high = cm[RSS + "_min"], cm[RSS + "_mean"], cm[RSS + "_max"]
        assert low <= mean <= high <= 1.5 * low, (low, mean, high)  # one process's range
    assert (results[1]["env_runners"]["custom_metrics"][COUNTER + "_max"]
            >= results[0]["env_runners"]["custom_metrics"][COUNTER + "_max"])


def test_tracemalloc_sites_are_short_keys(ray_session):
    cls = MemoryProbeCallback.configure(
        probes={"process": {}, "tracemalloc": {"top": 5, "every": 5}}, driver=False,
        site_keys=True,
    )
    results = train(ppo_config(1, cls, ), iterations=2)
    er = results[-1]["env_runners"]
    sites = [k for k in er if k.startswith("memprobe/tracemalloc/top/")]
    assert sites, sorted(er)
    assert er["memprobe/tracemalloc/traced_bytes"] > 0
    for k in sites:
        site = k[len("memprobe/tracemalloc/top/"):].rsplit("/", 1)[0]
        assert "site-packages" not in k and not site.startswith("/") and " " not in k, k
        assert len(k) < 120, k
        assert re.fullmatch(r"[\w.<>/-]+:\d+|other", site), k


def test_raising_probe_is_counted_not_fatal(ray_session):
    cls = MemoryProbeCallback.configure(
        probes=["process", "raising"], plugins=["memprobe_test_raising_plugin"], driver=False
    )
    results = train(ppo_config(1, cls), iterations=2)
    for r in results:
        er = r["env_runners"]
        assert er["memprobe/errors/raising"] >= 1
        assert er[RSS] > 10 * 2**20


def test_plain_callable_for_on_episode_end(ray_session):
    fn = episode_end_callback(probes=["process"])
    from ray import cloudpickle

    cloudpickle.loads(cloudpickle.dumps(fn))  # what Ray uses to ship it to EnvRunners
    results = train(ppo_config(1, callbacks=None, on_episode_end=fn), iterations=1)
    assert results[0]["env_runners"][RSS] > 10 * 2**20


def test_configure_validates_in_the_driver():
    with pytest.raises(memprobe.ConfigError, match="procss"):
        MemoryProbeCallback.configure(probes=["procss"])
    with pytest.raises(memprobe.ConfigError, match="trigger"):
        MemoryProbeCallback.configure(trigger="step")
    with pytest.raises(memprobe.ConfigError, match="evry"):
        MemoryProbeCallback.configure(evry=3)
    with pytest.raises(memprobe.ConfigError, match="no_such_module"):
        MemoryProbeCallback.configure(plugins=["no_such_module"])
    with pytest.raises(memprobe.ConfigError, match="leak_check_every"):
        MemoryProbeCallback.configure(leak_every=3)  # the Prober's name, and a hint
    with pytest.raises(memprobe.ConfigError, match="diagnose"):
        MemoryProbeCallback.configure(diagnose=True, probes=["process"])
    cls = MemoryProbeCallback.configure(every=2)
    assert cls.options.every == 2 and MemoryProbeCallback.options.every == 1
    cb = cls()
    assert cb.prober is None  # nothing is built or started at construction


def test_leak_verdicts_per_env_runner(ray_session):
    cls = MemoryProbeCallback.configure(probes=["process"], trigger="sample", leak_check_every=1,
                                        driver=False)
    config = ppo_config(1, cls).training(train_batch_size=64, minibatch_size=64)
    results = train(config, iterations=3)
    er = results[-1]["env_runners"]
    assert er["memprobe/leak/suspect"] == 0.0  # a few samples: not enough data, no verdict
    assert RSS in er


def test_remote_learner_is_probed(ray_session):
    config = ppo_config(1).learners(num_learners=1)
    results = train(config, iterations=1)
    r = results[0]
    assert r["memprobe/learner_0/process/rss_bytes"] > 10 * 2**20
    assert r["memprobe/driver/process/rss_bytes"] > 10 * 2**20


def test_restarted_env_runner_resumes_probing(ray_session, tmp_path):
    import os
    import time

    cls = MemoryProbeCallback.configure(jsonl=str(tmp_path), driver=False)
    config = ppo_config(1, cls).fault_tolerance(restart_failed_env_runners=True)
    algo = config.build_algo()
    try:
        algo.train()
        group = algo.env_runner_group
        (old_pid,) = group.foreach_env_runner(lambda w: os.getpid(), local_env_runner=False)
        for actor in group._worker_manager._actors.values():
            ray_session.kill(actor, no_restart=False)
        new_pid = old_pid
        for _ in range(8):  # the restart takes a few seconds; training goes on meanwhile
            time.sleep(1)
            algo.train()
            pids = group.foreach_env_runner(lambda w: os.getpid(), local_env_runner=False)
            if pids and pids[0] != old_pid:
                new_pid = pids[0]
                break
        results = [algo.train()]
    finally:
        algo.stop()
    assert new_pid != old_pid
    assert results[-1]["env_runners"][RSS] > 10 * 2**20
    assert list(tmp_path.glob(f"memprobe-env_runner-1-{new_pid}.jsonl"))


def test_ray_metrics_without_ray_default_is_one_clear_error():
    import subprocess
    import sys

    code = ("import sys; sys.modules['aiohttp'] = None\n"
            "import memprobe\n"
            "from memprobe_rllib import MemoryProbeCallback\n"
            "try:\n"
            "    MemoryProbeCallback.configure(ray_metrics=True)\n"
            "except memprobe.ConfigError as exc:\n"
            "    print(exc)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1, r.stdout + r.stderr
    assert lines[0].startswith("ray_metrics: ") and 'pip install "pymemprobe[ray]"' in lines[0]
    with pytest.raises(memprobe.ConfigError, match="ray_metrics"):
        MemoryProbeCallback.configure(ray_metrics="yes")


def test_jsonl_true_writes_in_each_nodes_session_log_directory(ray_session):
    """``jsonl=True``: where ``memprobe report --ray`` reads, each line tagged with its node."""
    memprobe_ray = pytest.importorskip("memprobe_ray")
    ray = ray_session
    node = ray.get_runtime_context().get_node_id()
    folder = memprobe_ray.session_jsonl_dir()
    assert folder is not None and folder.endswith(f"/{memprobe_ray.LOG_FOLDER}/{node}")
    cls = MemoryProbeCallback.configure(jsonl=True)
    before = set(glob.glob(f"{folder}/memprobe-*.jsonl"))
    train(ppo_config(1, cls), iterations=1)
    new = sorted(set(glob.glob(f"{folder}/memprobe-*.jsonl")) - before)
    roles = set()
    for path in new:
        with open(path) as f:
            first = json.loads(f.readline())
        assert first["node"] == node, first
        roles.add(first["role"])
    assert {"driver", "env_runner"} <= roles, new
