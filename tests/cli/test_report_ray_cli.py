"""``memprobe report --ray``'s arguments, checked before any Ray is reached."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _report(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memprobe", "report", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_ray_and_files_together_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("")
    r = _report("a.jsonl", "--ray", "", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr == ("memprobe: error: --ray reads the cluster's files: give either --ray "
                        "or files, not both\n")


def test_no_files_and_no_ray_is_one_line_error(tmp_path: Path) -> None:
    r = _report(cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr == "memprobe: error: give the JSONL files to report on, or --ray\n"


def test_a_bad_cap_is_named(tmp_path: Path) -> None:
    r = _report("--ray", "--max-file-mib", "0", cwd=tmp_path)
    assert r.returncode == 2 and "--max-file-mib must be a number of MiB from" in r.stderr
