"""A real headless browser for the HTML report's tests (Debian's chromium)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None,
                                    reason="needs chromium (apt-get install chromium)")


def chromium(tmp_path: Path, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Open ``page`` in headless chromium with ``args`` (``--screenshot=...``,
    ``--dump-dom``), a profile of its own under ``tmp_path``."""
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", *args, page.as_uri()],
        capture_output=True, text=True, timeout=120)


def rows_with_run(mask, min_len: int) -> int:
    """Rows of ``mask`` holding a run of at least ``min_len`` True pixels."""
    import numpy as np

    count = 0
    for row in mask:
        padded = np.concatenate(([0], row.astype(np.int8), [0]))
        edges = np.flatnonzero(np.diff(padded))
        if len(edges) and (edges[1::2] - edges[::2]).max() >= min_len:
            count += 1
    return count
