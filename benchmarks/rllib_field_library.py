"""The leaks made through library calls of field_accuracy_rllib.py (issue 24): what a
right verdict names first and which kinds it may give, the report's culprits on an
EnvRunner's JSONL, the judgement and the table."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from typing import Any

from rllib_field_envs import fault_line
from rllib_field_helpers import factory_line

#: Cases of leaks made through library calls: the first culprit named (live, in the
#: report, by check_rllib_leaks) must start with one of the texts and contain the
#: last, by mode; and the kinds the report may give.
LIBRARY_CASES: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "numpy_leak": {m: ((fault_line("numpy"),), " → numpy/") for m in ("default", "diagnose",
                                                                      "memray")},
    "json_leak": {m: ((fault_line("json"),), " → json/") for m in ("default", "diagnose",
                                                                   "memray")},
    "regex_leak": {m: ((fault_line("regex"),), " → re/") for m in ("default", "diagnose",
                                                                   "memray")},
    # The factory is the user's own helper: its line is the nearest user frame.
    "factory_leak": {m: ((factory_line(),), "") for m in ("default", "diagnose", "memray")},
    # Native memory: without memray, "native" or the user's line that makes the tensors
    # that hold it; with memray, the user's line then C.
    "torch_leak": {"default": (("native", fault_line("torch")), ""),
                   "diagnose": (("native", fault_line("torch")), ""),
                   "memray": ((fault_line("torch"),), " → ")},
    # The helper is the user's own: its line, or the env's, holds the addresses kept.
    "native_lib_leak": {"default": (("native", "native_helper.py:", fault_line("native_lib")), ""),
                        "diagnose": (("native", "native_helper.py:", fault_line("native_lib")),
                                     ""),
                        "memray": (("native_helper.py:",), "leaky_alloc")},
}
#: The kinds a right report gives (a kept class of a module's own is "objects").
LIBRARY_KINDS: dict[str, tuple[str, ...]] = {
    "numpy_leak": ("python",), "json_leak": ("python",),
    "regex_leak": ("python", "objects"), "factory_leak": ("python", "objects"),
    "torch_leak": ("native",), "native_lib_leak": ("native",),
}


def report_json(logdir: str) -> dict[str, Any]:
    """``memprobe report --json`` on the EnvRunner's JSONL: its kind and culprits."""
    from memprobe import KINDS

    files = sorted(glob.glob(os.path.join(logdir, "memprobe-env_runner-*.jsonl")))
    if not files:
        return {"kind": None, "culprits": [], "error": "no EnvRunner JSONL"}
    out = subprocess.run([sys.executable, "-m", "memprobe", "report", "--json", *files],
                         capture_output=True, text=True, timeout=300)
    if out.returncode not in (0, 1):
        return {"kind": None, "culprits": [], "error": out.stderr.strip()[-300:]}
    procs = json.loads(out.stdout).get("processes", [])
    p = procs[0] if procs else {}
    # The leaking sites and types; else what the leaking metrics' verdicts name (a
    # native leak's holders or memray's stack), resident size first, as the text says.
    culprits = list(p.get("culprits", []))
    if not culprits:
        leaking = sorted((m for m in p.get("metrics", []) if m.get("leak")),
                         key=lambda m: m.get("metric") != "process/rss_bytes")
        culprits = next((list(m["culprits"]) for m in leaking if m.get("culprits")), [])
    if not culprits and p.get("kind"):
        culprits = [KINDS[p["kind"]]]  # what the text names: the kind's words
    return {"kind": p.get("kind"), "culprits": culprits[:5], "leak": p.get("leak")}


def judge_library(row: dict[str, Any]) -> None:
    """For a case of :data:`LIBRARY_CASES`: ``row["library"]``, whether the live keys, the
    report and check_rllib_leaks name the culprit first, and whether the report's kind
    is right."""
    heads, within = LIBRARY_CASES[row["case"]][row["mode"]]

    def first_ok(names: list[str]) -> bool:
        """The first name's first frame is one of ``heads`` (a path ends with it), and the
        name holds ``within`` (live keys spell a frame chain their own way: the arrow is
        not compared)."""
        if not names:
            return False
        # A live key writes the chain's arrow as "_" (memprobe.keys.sanitize_key).
        first = re.sub(r"(\.py:\d+)_", r"\1 → ", names[0]).split(" → ")[0]
        frame = any(h in first if h.endswith(":") or h == "native" else first.endswith(h)
                    for h in heads)
        return frame and within.replace("→", "").strip() in names[0]

    er = row["processes"]["env_runner 1"]
    live = [c for c in er.get("culprits", [])]
    rep = row.get("report_json", {})
    lib = {"live": first_ok(live), "report": first_ok(rep.get("culprits", [])),
           "kind": rep.get("kind") in LIBRARY_KINDS[row["case"]]}
    off = row.get("check")
    if off is not None:
        # Offline, native memory has no site: only a Python case's suspects are judged.
        # Over check_rllib_leaks' 40 short episodes a kept tensor's storage reuses freed
        # heap (rss grows about 1 KiB per episode, "slightly"): the evidence is the
        # tensors themselves, retained objects, and their line is judged.
        kinds = LIBRARY_KINDS[row["case"]] + (("objects",) if row["case"] == "torch_leak"
                                              else ())
        judged = row["expect"] != "native" or row["case"] == "torch_leak"
        lib["check"] = (bool(off["leak"]) and off["kind"] in kinds
                        and (first_ok(off["suspects"]) if judged else True))
    row["library"] = lib
    if not all(lib.values()):
        row["ok"] = False
        row["why"] = (row.get("why", "") + " " + "; ".join(
            f"{k} wrong" for k, v in lib.items() if not v)).strip()


def print_library_table(rows: list[dict[str, Any]]) -> None:
    """A Markdown table of the library cases: the culprit each path names first, the kind."""
    rows = [r for r in rows if r.get("case") in LIBRARY_CASES]
    if not rows:
        return
    print()
    print("| case | mode | seed | EnvRunner alarm at (held) | live culprit keys | "
          "`memprobe report`: kind, first culprit | `check_rllib_leaks` env: kind, first "
          "suspect | ok |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        er = r.get("processes", {}).get("env_runner 1", {})
        at = er.get("alarm_at")
        held = "" if at is None else (" (held)" if er.get("held") else " (lowered)")
        rep = r.get("report_json", {})
        off = r.get("check") or {}
        first = (rep.get("culprits") or ["-"])[0]
        sus = (off.get("suspects") or ["-"])[0] if off.get("leak") else (
            "no leak" if off else "-")
        ok = "yes" if r.get("ok") else "NO: " + r.get("why", "")
        print(f"| {r['case']} | {r.get('mode', 'diagnose')} | {r['seed']} | {at or '-'}{held} "
              f"| {', '.join(er.get('culprits', [])) or '-'} | {rep.get('kind') or '-'}, "
              f"{first} | {off.get('kind') or '-'}, {sus} | {ok} |")
