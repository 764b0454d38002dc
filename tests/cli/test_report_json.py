"""The CI contract of `memprobe report`: --json (a versioned schema), --fail-on-leak's exit
status, --version. Real programs run under `memprobe run`, real reports read back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import memprobe
from memprobe.cli import EXIT_LEAK

LEAKY = ("import time\nheld = []\nfor i in range(100):\n"
         "    held.append(bytearray(200_000))\n    time.sleep(0.01)\n")
FLAT = "import time\nfor i in range(60):\n    time.sleep(0.01)\n"

NUM = (int, float, type(None))
STR = (str, type(None))
#: The documented schema (docs/cli.md, "JSON output"), field by field: the type each has.
DOCUMENT = {"schema_version": int, "memprobe_version": str, "files": list, "leak": bool,
            "processes": list}
PROCESS = {"label": str, "pid": int, "tags": dict, "files": list, "prefix": str,
           "samples": int, "span_seconds": NUM, "leak": bool, "leaking_metrics": list,
           "kind": STR, "culprits": list, "metrics": list, "leaking_sites": list,
           "suspects_title": str, "suspects": list, "notes": list, "hints": list}
METRIC = {"metric": str, "key": str, "unit": str, "start": NUM, "end": NUM, "peak": NUM,
          "growth": NUM, "status": STR, "words": STR, "leak": bool}
VERDICT = {"describe": str, "slope_per_step": NUM, "slope_low": NUM, "slope_high": NUM,
           "step": str, "rate_per_hour": NUM, "n_points": int, "warmup_points": int,
           "kind": STR, "note": str, "culprits": list}
SITE = {"site": str, "key": str, "status": str, "slope_per_step": NUM, "rate_per_hour": NUM}
SUSPECT = {"site": str, "detail": str}


def conforms(obj: Any, schema: dict[str, Any], where: str, optional: dict | None = None) -> None:
    assert isinstance(obj, dict), where
    allowed = {**schema, **(optional or {})}
    assert set(schema) <= set(obj) <= set(allowed), (where, sorted(set(obj) ^ set(allowed)))
    for name, typ in allowed.items():
        if name in obj:
            assert isinstance(obj[name], typ), (where, name, obj[name])


def check_document(doc: dict[str, Any]) -> None:
    conforms(doc, DOCUMENT, "document")
    assert doc["schema_version"] == 1 and doc["memprobe_version"] == memprobe.__version__
    for i, p in enumerate(doc["processes"]):
        conforms(p, PROCESS, f"processes[{i}]")
        for m in p["metrics"]:
            conforms(m, METRIC, f"{m.get('metric')}", VERDICT if m["status"] else None)
        for s in p["leaking_sites"]:
            conforms(s, SITE, "leaking_sites")
        for s in p["suspects"]:
            conforms(s, SUSPECT, "suspects")
    assert doc["leak"] == any(p["leak"] for p in doc["processes"])


def memprobe_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memprobe", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ci")
    for name, code in (("leaky", LEAKY), ("flat", FLAT)):
        (d / f"{name}.py").write_text(code)
        res = memprobe_cli("run", "--probes", "process,gc,tracemalloc", "--interval", "0.01",
                           "-q", "-o", f"{name}.jsonl", f"{name}.py", cwd=d)
        assert res.returncode == 0, res.stderr
    return d


def test_json_of_a_leak_names_the_verdicts_kind_culprit_and_rate(runs: Path) -> None:
    res = memprobe_cli("report", "--json", "leaky.jsonl", cwd=runs)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    check_document(doc)
    (proc,) = doc["processes"]
    assert doc["leak"] and proc["leak"] and proc["kind"] == "python"
    assert proc["culprits"][0] == "leaky.py:4"
    rss = next(m for m in proc["metrics"] if m["metric"] == "process/rss_bytes")
    assert rss["status"] == "leak" and rss["unit"] == "bytes"
    assert rss["rate_per_hour"] > 1e9 and rss["slope_low"] <= rss["slope_per_step"]
    assert "process/rss_bytes" in proc["leaking_metrics"]
    assert proc["tags"]["command"] == "leaky.py"


def test_json_of_a_flat_run_and_of_both(runs: Path) -> None:
    res = memprobe_cli("report", "--json", "flat.jsonl", "leaky.jsonl", cwd=runs)
    doc = json.loads(res.stdout)
    check_document(doc)
    flat, leaky = sorted(doc["processes"], key=lambda p: p["files"])
    assert not flat["leak"] and flat["leaking_metrics"] == [] and leaky["leak"]
    assert doc["files"] == ["flat.jsonl", "leaky.jsonl"]


def test_fail_on_leak_exit_status_is_distinct_from_errors(runs: Path) -> None:
    assert memprobe_cli("report", "--fail-on-leak", "flat.jsonl", cwd=runs).returncode == 0
    res = memprobe_cli("report", "--fail-on-leak", "leaky.jsonl", cwd=runs)
    assert res.returncode == EXIT_LEAK == 3
    assert "LEAK" in res.stdout  # the report is still printed
    assert memprobe_cli("report", "--fail-on-leak", "--json", "leaky.jsonl",
                        cwd=runs).returncode == EXIT_LEAK
    assert memprobe_cli("report", "--fail-on-leak", "nowhere.jsonl", cwd=runs).returncode == 2
    assert memprobe_cli("report", "--no-such-option", "leaky.jsonl", cwd=runs).returncode == 2


def test_non_finite_numbers_are_null_and_file_text_is_escaped(tmp_path: Path) -> None:
    lines = [json.dumps({"time": 100.0 + i, "step": i, "pid": 3, "role": "\x1b[2Jx",
                         "values": {"memprobe/process/rss_bytes": 1e6 + 1000 * i}})
             for i in range(30)]
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    res = memprobe_cli("report", "--json", "t.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "\x1b" not in res.stdout and res.stdout.isascii()
    doc = json.loads(res.stdout)
    check_document(doc)
    assert doc["processes"][0]["tags"]["role"] == "\x1b[2Jx"


def test_version(tmp_path: Path) -> None:
    res = memprobe_cli("--version", cwd=tmp_path)
    assert res.returncode == 0 and res.stdout == f"memprobe {memprobe.__version__}\n"
