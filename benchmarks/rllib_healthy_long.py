"""False alarms of the live RLlib leak alarm on long healthy runs, at every ``leak_check_every``.

Run (live, then replay): ``flock /tmp/ray.lock python benchmarks/rllib_healthy_long.py
[--case healthy churn bounded_cache] [--iterations 100] [--steps 2000] [--out /tmp/rllong]
[--live-check-every N]``;
replay only: ``python benchmarks/rllib_healthy_long.py --replay /tmp/rllong
[--check-every 2 5 20]``.

**Live.** PPO on CartPole-v1 (1 remote EnvRunner, the Learner in the driver,
``train_batch_size=--steps``) with ``MemoryProbeCallback.configure(jsonl=DIR)``,
every other option at its default (``leak_check_every=20``), the env wrapped by
one of ``rllib_field_envs.CASES``' non-leaking cases: healthy, churn, a bounded
cache (3 MiB that fills, then stays full). At every iteration it records the
live leak keys of the EnvRunner (``result["env_runners"]["memprobe/leak/..."]``)
and of the driver (``memprobe/driver/leak/...``) in ``DIR/<case>/iterations.jsonl``:
an iteration alarms when a ``suspect`` key is 1 or a ``culprit`` key is there.

**Replay.** Each process's recorded JSONL is fed, sample by sample, through the
adapter's own judging: a :class:`memprobe.History` of the adapter's ``history``
(200), the Prober's leak alarm (``memprobe.engine._alarm_checks.AlarmChecks`` around a
:class:`memprobe.LeakAlarm` with the adapter's ``alarm_options`` and
``leak_confirmations``) at each ``--check-every``, and the adapter's
:class:`memprobe_rllib._leak.LeakState` read, as RLlib reads it, once per
iteration (the EnvRunner's last sample before the iteration's result, each
driver sample). So nine runs of 100 iterations are made of three. The replay at
the live ``leak_check_every`` must give the live keys again (printed beside them).
The recorded resident size includes what the live run's own checks kept; a run
checking at another cadence would have kept its own (``overhead/check_retained_bytes``,
which the verdicts subtract, is the live run's).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
import warnings
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

HEALTHY_CASES = ("healthy", "churn", "bounded_cache")
#: Where each process's live leak keys are in an iteration's result.
PROCESSES = {"env_runner 1": ("env_runners", "memprobe/leak/"),
             "driver": (None, "memprobe/driver/leak/")}
RSS = {"env_runner 1": ("env_runners", "memprobe/process/rss_bytes"),
       "driver": (None, "memprobe/driver/process/rss_bytes")}


def alarm_keys(keys: dict[str, float], head: str) -> list[str]:
    """The keys under ``head`` that say an alarm is raised: a ``suspect`` at 1, a culprit."""
    return sorted(k[len(head):] for k, v in keys.items() if k.startswith(head) and (
        (k.endswith("suspect") and v) or k.startswith(head + "culprit/")))


def _section(result: dict[str, Any], where: str | None) -> dict[str, Any]:
    return result.get(where, {}) if where else result


# -- live runs ---------------------------------------------------------------------------
def live_run(case: str, iterations: int, steps: int, out: str, seed: int = 0,
             leak_check_every: int | None = None) -> dict[str, Any]:
    """One PPO run of ``iterations``; its JSONL and ``iterations.jsonl`` in ``out/case``."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from rllib_field_envs import CASES

    from memprobe_rllib import MemoryProbeCallback

    env, expect = CASES[case]
    assert expect in ("healthy", "bounded"), f"{case} is a leak, not a healthy run"
    logdir = os.path.join(out, case)
    os.makedirs(logdir, exist_ok=True)
    for old in glob.glob(os.path.join(logdir, "*.jsonl")):
        os.remove(old)
    options: dict[str, Any] = {} if leak_check_every is None else {
        "leak_check_every": leak_check_every}
    cls = MemoryProbeCallback.configure(jsonl=logdir, **options)
    config = (PPOConfig().environment(env)
              .env_runners(num_env_runners=1)
              .training(train_batch_size=steps, minibatch_size=256, num_epochs=1)
              .callbacks(cls).debugging(log_level="ERROR", seed=seed))
    t0 = time.time()
    algo = config.build_algo()
    rows = []
    try:
        with warnings.catch_warnings(), \
                open(os.path.join(logdir, "iterations.jsonl"), "w") as f:
            warnings.simplefilter("ignore")
            for it in range(1, iterations + 1):
                result = algo.train()
                row: dict[str, Any] = {"iteration": it, "time": time.time()}
                for proc, (where, head) in PROCESSES.items():
                    section = _section(result, where)
                    row[proc] = {k[len(head):]: float(v) for k, v in section.items()
                                 if str(k).startswith(head)}
                    rss_where, rss_key = RSS[proc]
                    row[proc]["rss_bytes"] = float(_section(result, rss_where).get(rss_key, 0))
                rows.append(row)
                f.write(json.dumps(row) + "\n")
                f.flush()
    finally:
        algo.stop()
    seconds = time.time() - t0
    with open(os.path.join(logdir, "run.json"), "w") as f:
        json.dump({"case": case, "iterations": iterations, "steps": steps, "seed": seed,
                   "seconds": round(seconds, 1),
                   "leak_check_every": cls.options.leak_check_every}, f)
    return {"case": case, "seconds": seconds, "rows": rows}


def live_alarms(logdir: str) -> dict[str, list[int]]:
    """Per process, the iterations whose live keys carry an alarm."""
    out: dict[str, list[int]] = {p: [] for p in PROCESSES}
    with open(os.path.join(logdir, "iterations.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            for proc in PROCESSES:
                if alarm_keys(row[proc], ""):
                    out[proc].append(row["iteration"])
    return out


# -- replay ------------------------------------------------------------------------------
class _Replayed:
    """What :class:`LeakState` reads of its process's Prober: the history and the alarm."""

    def __init__(self, history: Any, alarm: Any) -> None:
        self.history = history
        self.alarm = alarm


def replay_process(samples: list[Any], prefix: str, role: str, flush_after: list[int],
                   check_every: int) -> dict[str, Any]:
    """Feed ``samples`` (one process's JSONL) through the adapter's alarm at ``check_every``.

    :param flush_after: the index of the sample after which RLlib read the keys, per
        iteration (ascending).
    :returns: ``alarms`` (iterations whose keys carry an alarm, 1-based), ``fired``
        (the alarm's confirmed verdicts), ``checks``.
    """
    from memprobe.engine._alarm_checks import AlarmChecks, make_alarm
    from memprobe.engine._history import History
    from memprobe_rllib import CallbackOptions
    from memprobe_rllib._leak import LeakState

    options = CallbackOptions()
    leak = LeakState(prefix, role, 1 if role == "env_runner" else None, "replay")
    fired: list[Any] = []

    def on_leak(verdict: Any) -> None:
        fired.append(verdict)
        leak.on_leak(verdict)

    def failed(name: str, where: str, exc: BaseException) -> None:
        raise RuntimeError(f"the replayed alarm failed in {name} ({where})") from exc

    alarm = make_alarm(on_leak, check_every, options.leak_confirmations,
                       options.alarm_options, False)
    history = History(options.history)
    checks = AlarmChecks(alarm, prefix, history, failed)
    leak.prober = _Replayed(history, alarm)
    capture_head = prefix + "/capture/"
    head = prefix + "/leak/"  # the leak keys: memprobe/leak/..., memprobe/driver/leak/...
    keys_seen: set[str] = set()
    alarms: list[int] = []
    details: dict[int, list[str]] = {}
    per_iteration: list[dict[str, float]] = []  # the leak keys RLlib read, per iteration
    leaking: dict[str, list[int]] = {}  # key -> iterations of the checks judging it leaking
    n_checks = 0
    iteration = 0
    flushes = iter(flush_after)
    next_flush = next(flushes, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, s in enumerate(samples):
            # A capture's line is written to the sinks, never put in the history.
            if not (s.values and all(k.startswith(capture_head) for k in s.values)):
                history.append(s.time_seconds, s.step, s.pid, s.values)
                keys_seen.update(s.values)
                before = alarm.latest
                checks.after_sample(s.values, s.time_seconds, s.step, s.pid)
                if alarm.latest is not before:
                    n_checks += 1
                    for v in alarm.latest.leaking:  # judged leaking, confirmed or not
                        leaking.setdefault(v.key, []).append(iteration + 1)
            while next_flush is not None and i >= next_flush:
                iteration += 1
                values = leak.values(keys_seen)
                per_iteration.append({k[len(head):]: v for k, v in values.items()})
                raised = alarm_keys(values, head)
                if raised:
                    alarms.append(iteration)
                    details[iteration] = raised
                next_flush = next(flushes, None)
    latest = alarm.latest.verdicts if alarm.latest is not None else {}
    return {"alarms": alarms, "details": details, "checks": n_checks, "keys": per_iteration,
            "leaking": leaking,
            "fired": [v.describe() for v in fired],
            "final": {k: v.describe() for k, v in latest.items() if v.status != "ok"}}


def _flush_points(samples: list[Any], times: list[float]) -> list[int]:
    """For each iteration's result time, the index of the last sample taken before it."""
    out = []
    j = -1
    for t in times:
        while j + 1 < len(samples) and samples[j + 1].time_seconds <= t:
            j += 1
        out.append(j)
    return out


def replay_case(logdir: str, check_every: list[int]) -> dict[str, Any]:
    """Every process of one recorded run, replayed at each ``check_every``."""
    import memprobe
    from memprobe_rllib import CallbackOptions

    with open(os.path.join(logdir, "iterations.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    times = [r["time"] for r in rows]
    meta_path = os.path.join(logdir, "run.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
    out: dict[str, Any] = {"case": os.path.basename(logdir.rstrip("/")),
                           "iterations": len(rows), "seconds": meta.get("seconds"),
                           "live": live_alarms(logdir), "replay": {}, "rss": {},
                           "agree": {}, "live_every": meta.get(
                               "leak_check_every", CallbackOptions().leak_check_every)}
    for path in sorted(glob.glob(os.path.join(logdir, "memprobe-*.jsonl"))):
        role = os.path.basename(path).split("-")[1]
        proc = {"env_runner": "env_runner 1", "driver": "driver"}.get(role)
        if proc is None:
            continue
        prefix = "memprobe" if role == "env_runner" else "memprobe/driver"
        samples = memprobe.read_samples(path)
        rss = [s.values[prefix + "/process/rss_bytes"] for s in samples
               if prefix + "/process/rss_bytes" in s.values]
        out["rss"][proc] = {"start": rss[0], "end": rss[-1], "samples": len(samples),
                            "file": path}
        # The EnvRunner's keys are logged at the end of its sample() call; the driver's
        # sample in on_train_result: both before train() returns.
        flush = _flush_points(samples, times)
        for k in check_every:
            out["replay"].setdefault(str(k), {})[proc] = replay_process(
                samples, prefix, role, flush, k)
        live_every = out["live_every"]
        out["agree"][proc] = agreement([r[proc] for r in rows], replay_process(
            samples, prefix, role, flush, live_every)["keys"])
    return out


def differences(live: list[dict[str, float]],
                replayed: list[dict[str, float]]) -> list[tuple[int, dict[str, Any]]]:
    """The iterations (1-based) whose live leak keys the replay does not give again, with
    ``{key: (live, replayed)}``: a key of the live result missing or 0.1% off, or a key
    the live result lacks; an iteration only one of them has: ``{"iteration": (in live,
    in replayed)}``.

    Not compared: ``hours_to_oom``, a forecast against the memory this machine had
    free at the time; and, once the alarm is raised, the culprits the live alarm's
    capture named (the replay opens no capture: it would trace the replaying process).
    """
    out: list[tuple[int, dict[str, Any]]] = [
        (i, {"iteration": (i <= len(live), i <= len(replayed))})
        for i in range(min(len(live), len(replayed)) + 1, max(len(live), len(replayed)) + 1)]
    for i, (a, b) in enumerate(zip(live, replayed), 1):
        # Once both raised the alarm, the live culprits are whatever its capture has named
        # by then (a capture that finished sets the native rate to 0 for a Python line),
        # which depends on the live process's timing: not compared.
        captured = bool(a.get("suspect") and b.get("suspect"))
        diff = {k: (v, b.get(k)) for k, v in a.items()
                if k not in ("rss_bytes", "hours_to_oom")
                and not (captured and k.startswith("culprit/"))
                and not (k in b and abs(v - b[k]) <= 1e-3 * max(abs(v), 1.0))}
        diff.update({k: (None, v) for k, v in b.items()
                     if k not in a and not (captured and k.startswith("culprit/"))})
        if diff:
            out.append((i, diff))
    return out


def agreement(live: list[dict[str, float]], replayed: list[dict[str, float]]) -> str:
    """How many iterations' live leak keys the replay at the live cadence gives again."""
    return f"{len(live) - len(differences(live, replayed))} of {len(live)}"


def _n_leaking(replayed: dict[str, Any]) -> Any:
    """Checks that judged some metric leaking (confirmed or not), or ``-``."""
    if "leaking" not in replayed:
        return "-"
    return len({it for its in replayed["leaking"].values() for it in its})


def print_table(results: list[dict[str, Any]], check_every: list[int]) -> None:
    """A Markdown table: run kind x leak_check_every -> alarms."""
    print("| run | leak_check_every | iterations alarmed, EnvRunner 1 (replay) | "
          "driver (replay) | alarms fired (EnvRunner / driver) | checks (EnvRunner / driver) "
          "| checks judging a leak, unconfirmed (EnvRunner / driver) "
          "| iterations | EnvRunner rss start → end (MiB) | EnvRunner samples | wall time (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        er = r["rss"].get("env_runner 1", {})
        rss = (f"{er['start'] / 2**20:.0f} → {er['end'] / 2**20:.0f}" if er else "-")
        live = r["live"]
        print(f"| {r['case']} | {r['live_every']}, live | {len(live['env_runner 1'])} "
              f"| {len(live['driver'])} "
              f"| - | - | - | {r['iterations']} | {rss} | {er.get('samples', '-')} "
              f"| {r['seconds']} |")
        for k in check_every:
            rep = r["replay"][str(k)]
            e, d = rep.get("env_runner 1", {}), rep.get("driver", {})
            print(f"| {r['case']} | {k} | {len(e.get('alarms', []))} | {len(d.get('alarms', []))} "
                  f"| {len(e.get('fired', []))} / {len(d.get('fired', []))} "
                  f"| {e.get('checks', '-')} / {d.get('checks', '-')} "
                  f"| {_n_leaking(e)} / {_n_leaking(d)} | {r['iterations']} "
                  f"| {rss} | {er.get('samples', '-')} | - |")


def replay(out: str, check_every: list[int], cases: list[str]) -> list[dict[str, Any]]:
    results = []
    for case in cases:
        logdir = os.path.join(out, case)
        if not os.path.exists(os.path.join(logdir, "iterations.jsonl")):
            print(f"{logdir}: no recorded run, skipped", file=sys.stderr)
            continue
        r = replay_case(logdir, check_every)
        results.append(r)
        for k, procs in r["replay"].items():
            for proc, rep in procs.items():
                for it, raised in rep["details"].items():
                    print(f"{case} leak_check_every={k} {proc} iteration {it}: {raised}",
                          file=sys.stderr)
                for key, its in rep["leaking"].items():
                    print(f"{case} leak_check_every={k} {proc} judged {key} leaking at the "
                          f"checks of iterations {its}", file=sys.stderr)
                for text in rep["fired"]:
                    print(f"{case} leak_check_every={k} {proc} fired: {text}", file=sys.stderr)
                for text in rep["final"].values():
                    print(f"{case} leak_check_every={k} {proc} last check: {text}",
                          file=sys.stderr)
        print(f"{case}: the replay at the live leak_check_every gives the live keys again at "
              f"{r['agree']} iterations", file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", nargs="+", default=list(HEALTHY_CASES), choices=HEALTHY_CASES)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--steps", type=int, default=2000, help="train_batch_size")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "rllong"))
    ap.add_argument("--check-every", type=int, nargs="+", default=[2, 5, 20],
                    help="leak_check_every of the replays")
    ap.add_argument("--live-check-every", type=int, default=None,
                    help="leak_check_every of the live runs (default: the adapter's)")
    ap.add_argument("--replay", metavar="DIR",
                    help="replay the runs recorded in DIR (no Ray), print the table")
    args = ap.parse_args(argv)
    if args.replay:
        print_table(replay(args.replay, args.check_every, args.case), args.check_every)
        return 0
    import ray

    src = os.path.join(os.path.dirname(HERE), "src")
    path = os.pathsep.join(p for p in (HERE, src, os.environ.get("PYTHONPATH")) if p)
    # address="local": a new instance, never a cluster another program left running.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        for case in args.case:
            r = live_run(case, args.iterations, args.steps, args.out,
                         leak_check_every=args.live_check_every)
            print(f"{case}: {args.iterations} iterations in {r['seconds']:.0f} s; live alarms "
                  f"{live_alarms(os.path.join(args.out, case))}", flush=True)
    finally:
        ray.shutdown()
    print_table(replay(args.out, args.check_every, args.case), args.check_every)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
