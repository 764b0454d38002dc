"""Leaks a user makes outside the env (issue 24), run as a user would: PPO on CartPole-v1,
``ray.init(num_cpus=2)``, 1 remote EnvRunner, ``MemoryProbeCallback.configure(jsonl=DIR)``
(``--mode diagnose``: with ``diagnose=True``). Prints each iteration's suspect and culprit
keys and the resident-size rates, then ``memprobe report --json`` on every process's JSONL.

Cases: ``learner_numpy`` / ``learner_torch`` (a custom PPO Learner that keeps a numpy / torch
copy of every minibatch: benchmarks/rllib_user_learner.py), ``cb_list`` (a callback of the
user's, keeping every episode's observations, beside memprobe's in a list), ``cb_sub`` (the
same in a subclass of MemoryProbeCallback: benchmarks/rllib_user_callbacks.py),
``driver_results`` (the driver's loop keeps every result of ``algo.train()``), ``healthy``.

    PYTHONPATH=src flock /tmp/ray.lock python benchmarks/rllib_user_leaks.py learner_numpy \
        --mode diagnose --iterations 70 --out /tmp/rrt/learner_numpy-diagnose
"""
import argparse, glob, json, os, subprocess, sys, time, warnings

ap = argparse.ArgumentParser()
ap.add_argument("case", choices=["healthy", "learner_numpy", "learner_torch", "cb_list", "cb_sub", "driver_results"])
ap.add_argument("--mode", choices=["default", "diagnose"], default="default")
ap.add_argument("--iterations", type=int, default=20)
ap.add_argument("--out", required=True)
ap.add_argument("--num-learners", type=int, default=0)
a = ap.parse_args()
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ray
from ray.rllib.algorithms.ppo import PPOConfig
from memprobe_rllib import MemoryProbeCallback

os.makedirs(a.out, exist_ok=True)
opts = {"jsonl": a.out}
if a.mode == "diagnose":
    opts["diagnose"] = True
path = os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
         runtime_env={"env_vars": {"PYTHONPATH": path}})
config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
          .training(train_batch_size=2000, minibatch_size=500, num_epochs=4)
          .learners(num_learners=a.num_learners)
          .debugging(log_level="ERROR", seed=0))
cb = MemoryProbeCallback.configure(**opts)
if a.case in ("learner_numpy", "learner_torch"):
    import rllib_user_learner as mylearner
    cls = mylearner.NumpyKeepingLearner if a.case == "learner_numpy" else mylearner.TorchKeepingLearner
    config = config.learners(learner_class=cls)
if a.case == "cb_list":
    import rllib_user_callbacks as mycallbacks
    config = config.callbacks([cb, mycallbacks.EpisodeKeeper])
elif a.case == "cb_sub":
    import rllib_user_callbacks as mycallbacks
    config = config.callbacks(mycallbacks.MyCallbacks.configure(**opts))
else:
    config = config.callbacks(cb)

algo = config.build_algo()
results = []
rows = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for i in range(a.iterations):
        t = time.time()
        result = algo.train()
        if a.case == "driver_results":
            results.append(result)   # the user's own loop keeps every result
        er = {f"env_runners/{k}": v for k, v in result["env_runners"].items() if "memprobe/leak" in str(k) or "memprobe/errors" in str(k)}
        top = {k: v for k, v in result.items() if str(k).startswith("memprobe/") and ("/leak/" in k or "/errors/" in k)}
        row = {"it": i + 1, "sec": round(time.time() - t, 1), **er, **top}
        rows.append(row)
        sus = {k: v for k, v in row.items() if k.endswith("suspect") and v == 1.0 and k.count("/") <= 3}
        cul = {k: round(v) for k, v in row.items() if "/culprit/" in k}
        rates = {k: round(v/2**20, 1) for k, v in row.items() if k.endswith("rss_bytes/rate_per_hour")}
        print(i + 1, row["sec"], "suspect", sus, "culprits", cul, "rss MiB/h", rates, flush=True)
algo.stop()
json.dump(rows, open(os.path.join(a.out, "rows.json"), "w"), default=str)
for w in caught:
    if "memprobe" in str(w.message):
        print("WARNING:", w.category.__name__, str(w.message)[:400])
ray.shutdown()
for f in sorted(glob.glob(os.path.join(a.out, "*.jsonl"))):
    out = subprocess.run([sys.executable, "-m", "memprobe", "report", "--json", f], capture_output=True, text=True)
    try:
        p = json.loads(out.stdout)["processes"][0]
        leaking = [(m["metric"], m.get("status"), m.get("culprits", [])[:3]) for m in p.get("metrics", []) if m.get("leak") or m.get("status") not in ("ok", "no leak", None)]
        print("REPORT", os.path.basename(f), "leak", p.get("leak"), "kind", p.get("kind"), "culprits", p.get("culprits", [])[:4], leaking[:4])
    except Exception as exc:
        print("REPORT", f, "failed", exc, out.stderr[-500:])
