"""When the live alarm of a process sampled once per ``train()`` iteration (the RLlib
driver, a remote Learner) fires, replayed from recorded JSONL: with the adapter's rules
for such processes (``memprobe_rllib._options.PER_ITERATION_*``) and with the rules of
an EnvRunner (a verdict on 40 samples, checks counted 40 samples apart), which those
processes had before.

Each sample of those files is one iteration, so the alarm's iteration is the sample's
index. Healthy files must give no alarm; leaking ones should alarm early.

    python benchmarks/rllib_iteration_alarm.py LABEL=GLOB [LABEL=GLOB ...]

e.g. ``healthy-driver=/tmp/rllong/healthy/memprobe-driver-*.jsonl
learner_numpy=/tmp/learner/learner_numpy-diagnose/memprobe-driver-*.jsonl``
(the recordings of benchmarks/rllib_healthy_long.py and benchmarks/rllib_user_leaks.py).
"""

from __future__ import annotations

import glob
import sys
import warnings
from typing import Any

import memprobe
from memprobe.engine._alarm_checks import AlarmChecks
from memprobe.engine._history import History
from memprobe.leak._alarm import LeakAlarm
from memprobe_rllib import CallbackOptions
from memprobe_rllib._options import PER_ITERATION_EVIDENCE


def replay(path: str, per_iteration: bool) -> tuple[int, list[tuple[int, str]]]:
    """Samples in the file, and (iteration, metric) of each alarm fired."""
    samples = memprobe.read_samples(path)
    role = samples[0].values and next(iter(samples[0].values)).split("/")[1]
    prefix = f"memprobe/{role}"
    options = CallbackOptions()
    fired: list[tuple[int, str]] = []
    n = 0
    if per_iteration:
        alarm = LeakAlarm(lambda v: fired.append((n, v.metric)), check_every=1,
                          confirmations=options.leak_confirmations,
                          options=options.alarm_options_for(role),
                          evidence_samples=PER_ITERATION_EVIDENCE)
    else:
        alarm = LeakAlarm(lambda v: fired.append((n, v.metric)),
                          check_every=options.leak_check_every,
                          confirmations=options.leak_confirmations,
                          options=options.alarm_options)
    history = History(options.history)

    def failed(name: str, where: str, exc: BaseException) -> Any:
        raise RuntimeError(f"the replayed alarm failed in {name} ({where})") from exc

    checks = AlarmChecks(alarm, prefix, history, failed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in samples:
            if s.values and all(k.startswith(prefix + "/capture/") for k in s.values):
                continue  # the capture's line: written to the sinks, not the history
            n += 1
            history.append(s.time_seconds, s.step, s.pid, s.values)
            checks.after_sample(s.values, s.time_seconds, s.step, s.pid)
    return n, fired


def main(args: list[str]) -> None:
    print("| recording | iterations | alarm before (iteration, metric) | alarm now |")
    print("|---|---:|---|---|")
    for arg in args:
        label, pattern = arg.split("=", 1)
        for path in sorted(glob.glob(pattern)):
            n, before = replay(path, per_iteration=False)
            _, now = replay(path, per_iteration=True)

            def show(fired: list[tuple[int, str]]) -> str:
                return ", ".join(f"{i} {m}" for i, m in fired) or "none"

            print(f"| {label} | {n} | {show(before)} | {show(now)} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
