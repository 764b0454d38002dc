"""Issue 24, native stacks in RLlib: naming the C functions of a memray window loads the
symbols of every library mapped, some 350 MiB with torch; read in the process probed,
they stayed in its resident size, which memprobe then judged as the user's leak (an
EnvRunner's rss jumped by 776 MiB at the window's close and its verdict was lost).
The window is read in a child interpreter; the sites are the same."""

from __future__ import annotations

import psutil
import pytest

from memprobe.probes.memray import MemrayWindow, read_sites_apart

pytest.importorskip("memray")
MiB = 1 << 20


def test_naming_c_functions_leaves_no_memory_in_the_probed_process() -> None:
    torch = pytest.importorskip("torch")
    kept = []
    window = MemrayWindow(native_traces=True)
    window.open()
    for _ in range(20):
        kept.append(torch.ones(1024))  # 4 KiB of storage each, from c10's allocator
    rss = psutil.Process().memory_info().rss
    sites = window.close()
    grown = psutil.Process().memory_info().rss - rss
    assert grown < 32 * MiB, f"closing the window grew rss by {grown / MiB:.0f} MiB"
    named = [s for s in sites if "test_memray_reader.py:" in s.site and "alloc_cpu" in s.site]
    assert named and named[0].size_bytes >= 20 * 4096, sites[:5]


def test_a_capture_file_that_cannot_be_read_says_which(tmp_path) -> None:
    from memprobe import ProbeError

    bad = tmp_path / "not-a-capture.bin"
    bad.write_bytes(b"nothing memray wrote")
    with pytest.raises(ProbeError, match="not-a-capture.bin"):
        read_sites_apart(str(bad), native=True)
