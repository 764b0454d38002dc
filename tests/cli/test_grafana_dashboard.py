"""``memprobe grafana-dashboard``, run as a user would: a subprocess, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: Panels a user of the dashboard relies on (docs/cluster.md lists them).
PANELS = ("Resident memory (rss) per role", "Leak suspects", "Leak culprits (rank 1 = likeliest)")


def run(*args: str, cwd: Path, code: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "memprobe",
                                                            *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)


def check_dashboard(text: str) -> None:
    data = json.loads(text)
    titles = [p["title"] for p in data["panels"]]
    for title in PANELS:
        assert title in titles
    exprs = [t["expr"] for p in data["panels"] for t in p.get("targets", [])]
    assert any("ray_memprobe_process_rss_bytes" in e for e in exprs), exprs


def test_stdout_is_the_dashboard(tmp_path: Path) -> None:
    r = run("grafana-dashboard", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    check_dashboard(r.stdout)


def test_output_file_replaced_whole_without_importing_ray(tmp_path: Path) -> None:
    out = tmp_path / "dash.json"
    out.write_text("old")
    code = ("import sys; from memprobe.cli import main; s = main(sys.argv[1:]); "
            "assert 'ray' not in sys.modules, 'ray imported'; sys.exit(s)")
    r = run("grafana-dashboard", "-o", str(out), cwd=tmp_path, code=code)
    assert r.returncode == 0, r.stderr
    assert "dash.json" in r.stderr and r.stdout == ""
    check_dashboard(out.read_text())
    assert [p.name for p in tmp_path.iterdir()] == ["dash.json"]  # no temp file left


def test_output_symlink_refused(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    os.symlink(target, tmp_path / "link.json")
    r = run("grafana-dashboard", "-o", str(tmp_path / "link.json"), cwd=tmp_path)
    assert r.returncode == 2
    assert "symbolic link" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert target.read_text() == "keep me"


def test_without_memprobe_ray_one_line(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['memprobe_ray'] = None; from memprobe.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    r = run("grafana-dashboard", cwd=tmp_path, code=code)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and 'pip install "pymemprobe[ray]"' in lines[0], r.stderr
    assert r.stdout == ""
