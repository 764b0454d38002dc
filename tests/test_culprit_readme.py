"""The README's first example of the Prober, run as printed around a leak made through numpy, names the
user's line (issue 24)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
USER = "import numpy as np\nKEPT = []\n\ndef work():\n    KEPT.append(np.ones(4096))\n\n"


def test_readme_first_example_names_the_users_line_of_a_numpy_leak(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    first = next(b for b in blocks if "memprobe.Prober" in b)  # the first code example
    script = tmp_path / "app.py"
    # The README's work() is a stand-in for the user's step: this one leaks through numpy.
    readme_work = re.compile(r"^def work\(\).*?\n\n", re.S | re.M)
    assert readme_work.search(first), first
    script.write_text(USER + readme_work.sub("", first, count=1))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "culprits: app.py:5 → numpy/" in out.stdout, out.stdout
