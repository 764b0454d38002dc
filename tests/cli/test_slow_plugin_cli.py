"""A plugin slow to import is reported by ``memprobe report`` as by ``memprobe run``, and
by ``run`` also when ``--probes`` is refused (issue 27, item 20). A real distribution on
disk whose module sleeps on import, found through PYTHONPATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = str(Path(sys.executable).with_name("memprobe"))
SLOW = "took 1."


def _env(site: Path) -> dict[str, str]:
    info = site / "memprobe_sleepy-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: memprobe-sleepy\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[memprobe]\nsleepy = mpf_sleepy\n")
    (site / "mpf_sleepy.py").write_text(
        "import time\nimport memprobe\ntime.sleep(1.2)\n\n"
        "@memprobe.hookimpl\ndef memprobe_register_probes(register):\n    pass\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    return env


def test_20_slow_plugin_is_reported_by_report_and_by_a_refused_run(tmp_path: Path) -> None:
    env = _env(tmp_path / "site")
    (tmp_path / "a.jsonl").write_text("".join(
        json.dumps({"time": 1000.0 + i, "step": i, "pid": 7,
                    "values": {"memprobe/process/rss_bytes": 1000}}) + "\n" for i in range(30)))
    res = subprocess.run([SCRIPT, "report", "a.jsonl"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    warned = [x for x in res.stderr.splitlines() if SLOW in x]
    assert len(warned) == 1 and warned[0].startswith("memprobe: warning: ")
    assert "'memprobe-sleepy'" in warned[0]
    (tmp_path / "p.py").write_text("pass\n")
    res = subprocess.run([SCRIPT, "run", "--probes", "proces", "p.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    lines = res.stderr.splitlines()
    assert any(SLOW in x and "'memprobe-sleepy'" in x for x in lines)
    assert lines[-1].startswith("memprobe: error: probes: unknown probe 'proces'")
