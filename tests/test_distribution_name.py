"""The distribution is `pymemprobe` (PyPI's `memprobe` is another project); the import
name and the command stay `memprobe`."""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The first `name = ...` in pyproject.toml is [project]'s (tomllib is 3.11+).
NAME = re.search(r'^name = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)

# `pip install memprobe`, `pip install "memprobe[rllib]"`, `memprobe[native]` in prose.
_OLD_HINT = re.compile(r"pip install\s+[\"']?memprobe\b(?!_)|(?<![\w-])memprobe\[")
_NEW_HINT = re.compile(r"pip install\s+[\"']?pymemprobe\b|(?<![\w-])pymemprobe\[")


def _texts() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return files + sorted((ROOT / "src").rglob("*.py"))


def test_pyproject_names_the_distribution_pymemprobe() -> None:
    assert NAME == "pymemprobe"


def test_every_install_hint_names_the_distribution() -> None:
    old, new = [], 0
    for path in _texts():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _OLD_HINT.search(line):
                old.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
            new += len(_NEW_HINT.findall(line))
    assert not old, "install hints naming PyPI's unrelated `memprobe`:\n" + "\n".join(old)
    assert new >= 5, f"only {new} install hints name {NAME}; the search is not seeing them"


def test_the_editable_install_carries_the_pyproject_name() -> None:
    try:
        dist = importlib.metadata.distribution(NAME)
    except importlib.metadata.PackageNotFoundError:
        try:
            importlib.metadata.distribution("memprobe")
        except importlib.metadata.PackageNotFoundError:
            pytest.skip("memprobe is not installed as a distribution here")
        pytest.skip(f"the venv's editable install predates the rename to {NAME}; reinstall it")
    direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
    if not direct_url.get("dir_info", {}).get("editable"):
        pytest.skip(f"{NAME} is installed, but not editable from a checkout")
    assert dist.metadata["Name"] == NAME
    assert dist.entry_points.select(group="console_scripts", name="memprobe")


def test_python_m_memprobe_runs_ours() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-m", "memprobe", "--help"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "memprobe" in out.stdout and "report" in out.stdout
