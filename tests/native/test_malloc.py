"""The ``malloc`` probe on real allocations made through ctypes, never mocked."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap

import pytest

import memprobe
from memprobe import ProbeFailedWarning
from memprobe.metrics import lookup
from memprobe.probes import malloc as malloc_probe
from memprobe.probes.malloc import MallocProbe, malloc_stats

pytestmark = pytest.mark.skipif(not malloc_probe.supported(), reason="needs glibc mallinfo2()")

MiB = 1 << 20
SRC = os.path.dirname(os.path.dirname(os.path.abspath(memprobe.__file__)))


@pytest.fixture(scope="module")
def libc():
    lib = ctypes.CDLL("libc.so.6")
    lib.malloc.restype = ctypes.c_void_p
    lib.malloc.argtypes = [ctypes.c_size_t]
    lib.free.restype = None
    lib.free.argtypes = [ctypes.c_void_p]
    lib.memset.restype = ctypes.c_void_p
    lib.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    return lib


def _fresh(*parts: str) -> dict:
    """Run ``code`` in a fresh interpreter (an allocator with no history of this test
    session's frees) with ``libc`` and ``stats()`` defined: ``parts`` (each dedented) set
    ``out``, which comes back."""
    prelude = textwrap.dedent("""
        import ctypes, json
        from memprobe.probes.malloc import malloc_stats as stats, trim_reclaimed_bytes
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]
        libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        out = {}
    """)
    script = prelude + "".join(map(textwrap.dedent, parts)) + "\nprint(json.dumps(out))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": SRC})
    return json.loads(done.stdout)


def test_malloc_never_freed_grows_in_use_bytes():
    out = _fresh("""
        out["before"] = stats()
        blocks = [libc.malloc(4096) for _ in range(4096)]  # 16 MiB, never freed
        out["after"] = stats()
    """)
    before, after = out["before"], out["after"]
    assert after["in_use_bytes"] - before["in_use_bytes"] >= 16 * MiB
    # a fresh heap has little free to reuse (about 1-2 MiB): the arena grows for the rest
    assert after["arena_bytes"] - before["arena_bytes"] >= 12 * MiB
    assert after["free_bytes"] - before["free_bytes"] < 1 * MiB


def test_in_use_growth_is_paid_by_arena_growth_or_free_bytes(libc):
    # In this long-lived process the arena may already hold free chunks: the
    # growth of in-use bytes comes from them or from a larger arena.
    before = malloc_stats()
    blocks = [libc.malloc(4096) for _ in range(4096)]
    try:
        during = malloc_stats()
    finally:
        for p in blocks:
            libc.free(p)
    used = during["in_use_bytes"] - before["in_use_bytes"]
    paid = (during["arena_bytes"] - before["arena_bytes"]) + (
        before["free_bytes"] - during["free_bytes"])
    assert used >= 16 * MiB
    assert abs(used - paid) < 1 * MiB
    after = malloc_stats()
    assert after["in_use_bytes"] - before["in_use_bytes"] < 2 * MiB


def test_large_allocations_are_mmapped_chunks_and_in_use():
    # Over the largest mmap threshold glibc's dynamic threshold reaches (32 MiB), in a
    # fresh heap (a large free top chunk would serve them without mmap).
    out = _fresh("""
        out["before"] = stats()
        blocks = [libc.malloc(48 << 20) for _ in range(2)]
        out["during"] = stats()
    """)
    before, during = out["before"], out["during"]
    assert during["mmap_bytes"] - before["mmap_bytes"] >= 96 * MiB
    assert during["in_use_bytes"] - before["in_use_bytes"] >= 96 * MiB
    assert abs(during["arena_bytes"] - before["arena_bytes"]) < 1 * MiB


# Many small blocks, then all freed but every 50th: the survivors pin the heap at its
# high-water mark, down to the last block allocated.
FRAGMENT = """
    blocks = [libc.malloc(1000) for _ in range(20000)]
    for p in blocks:
        libc.memset(p, 1, 1000)  # resident, as a program's data would be
    kept = [p for i, p in enumerate(blocks) if i % 50 == 49]
    for i, p in enumerate(blocks):
        if i % 50 != 49:
            libc.free(p)
"""


def test_fragmentation_grows_free_bytes_with_in_use_flat_and_trim_reclaims_it():
    out = _fresh("""
        out["before"] = stats()
    """, FRAGMENT, """
        out["after"] = stats()
        out["reclaimed"] = trim_reclaimed_bytes()
        out["again"] = trim_reclaimed_bytes()
    """)
    before, after = out["before"], out["after"]
    # 20000 * ~1 KiB allocated, 400 kept: in use barely moved, free held grew by ~19 MiB.
    assert after["in_use_bytes"] - before["in_use_bytes"] < 2 * MiB
    assert after["free_bytes"] - before["free_bytes"] >= 15 * MiB
    assert out["reclaimed"] >= 10 * MiB
    assert out["again"] < 1 * MiB  # nothing left to give back


def test_prober_reports_malloc_keys_with_their_units(libc):
    prober = memprobe.Prober(probes=["malloc"], load_entrypoints=False).start()
    try:
        values = prober.sample(force=True)
        blocks = [libc.malloc(4096) for _ in range(2048)]
        grown = prober.sample(force=True)
        for p in blocks:
            libc.free(p)
        for metric in ("arena_bytes", "in_use_bytes", "free_bytes", "mmap_bytes"):
            key = f"memprobe/malloc/{metric}"
            assert isinstance(values[key], int)
            assert lookup(MallocProbe.metrics, metric).unit == "bytes"
        delta = grown["memprobe/malloc/in_use_bytes"] - values["memprobe/malloc/in_use_bytes"]
        assert delta >= 8 * MiB
    finally:
        prober.stop()


def test_trim_option_reports_what_malloc_trim_gave_back():
    out = _fresh("""
        from memprobe.probes.malloc import MallocProbe
        probe = MallocProbe(trim=True)
        probe.start()
    """, FRAGMENT, """
        out["first"] = probe.sample()
        out["second"] = probe.sample()
    """)
    assert out["first"]["trim_reclaimed_bytes"] >= 10 * MiB
    assert out["second"]["trim_reclaimed_bytes"] < 1 * MiB
    assert out["first"]["in_use_bytes"] > 0


def test_bad_trim_option_names_it():
    with pytest.raises(memprobe.ConfigError, match=r"malloc\.trim: must be a bool"):
        MallocProbe(trim="yes")  # type: ignore[arg-type]


def test_unsupported_platform_disables_the_probe_with_one_warning(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(malloc_probe, "_libc", malloc_probe._Libc())
    assert not malloc_probe.supported()
    prober = memprobe.Prober(probes=["malloc"], load_entrypoints=False)
    with pytest.warns(ProbeFailedWarning, match=r"unsupported: glibc malloc statistics exist "
                      r"on Linux only, not darwin"):
        prober.start()
    try:
        values = prober.sample(force=True)
        values = prober.sample(force=True)  # no second warning: warnings are errors here
        assert not any(k.startswith("memprobe/malloc/") for k in values)
    finally:
        prober.stop()
