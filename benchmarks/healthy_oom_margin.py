"""The OOM forecast of healthy RLlib processes over whole runs: how far it stays from the
alert rule of docs/cluster.md (``memprobe_leak_hours_to_oom < 6``).

Run: ``python benchmarks/healthy_oom_margin.py [DIR ...] [--alert-hours 6]`` (default
``/tmp/rllong/*``: the runs ``benchmarks/rllib_healthy_long.py`` records, each a
directory of a run's JSONL files).

Each process's JSONL (the EnvRunner's, the driver's) is fed, sample by sample, through
the adapter's own judging (a :class:`memprobe.History` of the adapter's 200 samples,
the Prober's ``AlarmChecks`` around a :class:`memprobe.LeakAlarm` with the adapter's
options), and the resident size's verdict is read after every check: its status, the
rate it forecasts with and its ``hours_to_oom``. A forecast depends on the memory free
when it is made, so the table gives the rate too, and the headroom under which that
rate would cross the alert rule (``rate * alert_hours``): a node with less free memory
than that would page for a healthy process.
"""

from __future__ import annotations

import argparse
import glob
import os
import warnings
from typing import Any

MIB = 1 << 20


def replay(path: str, prefix: str, role: str) -> dict[str, Any]:
    """One process's JSONL through the adapter's alarm; the lowest forecast and the
    highest rate forecast with, over every check."""
    import memprobe
    from memprobe.engine._alarm_checks import AlarmChecks, make_alarm
    from memprobe.engine._history import History
    from memprobe_rllib import CallbackOptions

    options = CallbackOptions()
    alarm = make_alarm(lambda v: None, options.leak_check_every, options.leak_confirmations,
                       options.alarm_options, False)
    history = History(options.history)

    def failed(name: str, where: str, exc: BaseException) -> None:
        raise RuntimeError(f"the replayed alarm failed in {name} ({where})") from exc

    checks = AlarmChecks(alarm, prefix, history, failed)
    samples = memprobe.read_samples(path)
    capture_head = prefix + "/capture/"
    key = prefix + "/process/rss_bytes"
    recorded = prefix + "/leak/hours_to_oom"
    low: dict[str, Any] | None = None
    top: dict[str, Any] | None = None
    forecasts = n_checks = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, s in enumerate(samples):
            if s.values and all(k.startswith(capture_head) for k in s.values):
                continue  # a capture's line, never in the history
            # The live run's own forecasts (``leak/hours_to_oom``) left out: the replay
            # makes its own.
            values = {k: v for k, v in s.values.items() if k != recorded}
            history.append(s.time_seconds, s.step, s.pid, values)
            before = alarm.latest
            checks.after_sample(values, s.time_seconds, s.step, s.pid)
            if alarm.latest is before or alarm.latest is None:
                continue
            n_checks += 1
            v = alarm.latest.verdicts.get(key)
            if v is None or v.hours_to_oom is None:
                continue
            forecasts += 1
            row = {"sample": i + 1, "status": v.status, "hours": v.hours_to_oom,
                   "rate": v.rate_per_hour, "span": v.span_points, "warmup": v.warmup_points}
            if low is None or row["hours"] < low["hours"]:
                low = row
            if top is None or row["rate"] > top["rate"]:
                top = row
    return {"samples": len(samples), "checks": n_checks, "forecasts": forecasts,
            "lowest": low, "fastest": top}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="*")
    ap.add_argument("--alert-hours", type=float, default=6.0)
    args = ap.parse_args()
    dirs = args.dirs or sorted(d for d in glob.glob("/tmp/rllong/*")
                               if glob.glob(os.path.join(d, "memprobe-*.jsonl")))
    from memprobe import oom_headroom

    h = oom_headroom(ray=False)
    print(f"headroom now: {h.bytes / MIB:,.0f} MiB ({h.source})" if h else "headroom: none")
    print("| run | process | samples | checks | forecasts | lowest hours_to_oom (sample, "
          "status, scale) | fastest rate forecast (MiB/h, sample, status, scale, warm-up) | "
          f"headroom under which it crosses {args.alert_hours:g} h (MiB) |")
    print("|---|---|---|---|---|---|---|---|")
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "memprobe-*.jsonl"))):
            role = os.path.basename(path).split("-")[1]
            if role not in ("env_runner", "driver"):
                continue
            prefix = "memprobe" if role == "env_runner" else "memprobe/driver"
            r = replay(path, prefix, role)
            lo, top = r["lowest"], r["fastest"]
            low = (f"{lo['hours']:,.1f} h ({lo['sample']}, {lo['status']}, {lo['span']:,})"
                   if lo else "-")
            fast = (f"{top['rate'] / MIB:+,.1f} ({top['sample']}, {top['status']}, "
                    f"{top['span']:,}, {top['warmup']})" if top else "-")
            cross = f"{top['rate'] * args.alert_hours / MIB:,.0f}" if top else "-"
            print(f"| {os.path.basename(d.rstrip('/'))} | {role} | {r['samples']:,} | "
                  f"{r['checks']} | {r['forecasts']} | {low} | {fast} | {cross} |", flush=True)


if __name__ == "__main__":
    main()
