"""The ``malloc`` probe on real allocations made through ctypes, never mocked."""

from __future__ import annotations

import ctypes
import sys

import pytest

import memprobe
from memprobe import ProbeFailedWarning
from memprobe.metrics import lookup
from memprobe.probes import malloc as malloc_probe
from memprobe.probes.malloc import MallocProbe, malloc_stats, trim_reclaimed_bytes

pytestmark = pytest.mark.skipif(not malloc_probe.supported(), reason="needs glibc mallinfo2()")

MiB = 1 << 20


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


def test_malloc_never_freed_grows_in_use_bytes(libc):
    before = malloc_stats()
    blocks = [libc.malloc(4096) for _ in range(4096)]  # 16 MiB in the main arena
    try:
        during = malloc_stats()
        assert during["in_use_bytes"] - before["in_use_bytes"] >= 16 * MiB
        assert during["arena_bytes"] - before["arena_bytes"] >= 15 * MiB
        assert during["free_bytes"] - before["free_bytes"] < 4 * MiB
    finally:
        for p in blocks:
            libc.free(p)
    after = malloc_stats()
    assert after["in_use_bytes"] - before["in_use_bytes"] < 2 * MiB


def test_large_allocations_are_mmapped_chunks_and_in_use(libc):
    before = malloc_stats()
    blocks = [libc.malloc(4 * MiB) for _ in range(4)]  # over the mmap threshold
    try:
        during = malloc_stats()
        assert during["mmap_bytes"] - before["mmap_bytes"] >= 16 * MiB
        assert during["in_use_bytes"] - before["in_use_bytes"] >= 16 * MiB
    finally:
        for p in blocks:
            libc.free(p)


def _fragment(libc, n: int = 20000, size: int = 1000, keep_every: int = 50) -> list[int]:
    """Many small blocks, then all freed but every ``keep_every``-th: the heap keeps its
    high-water mark because the survivors pin it, down to the last block allocated."""
    blocks = [libc.malloc(size) for _ in range(n)]
    for p in blocks:
        libc.memset(p, 1, size)  # resident, as a program's data would be
    kept = []
    for i, p in enumerate(blocks):
        if i % keep_every == keep_every - 1:
            kept.append(p)
        else:
            libc.free(p)
    return kept


def test_fragmentation_grows_free_bytes_with_in_use_flat_and_trim_reclaims_it(libc):
    before = malloc_stats()
    kept = _fragment(libc)
    try:
        after = malloc_stats()
        # 20000 * ~1 KiB allocated, 400 kept: in use barely moved, free held grew by ~19 MiB.
        assert after["in_use_bytes"] - before["in_use_bytes"] < 2 * MiB
        assert after["free_bytes"] - before["free_bytes"] >= 15 * MiB
        reclaimed = trim_reclaimed_bytes()
        assert reclaimed >= 10 * MiB
        assert trim_reclaimed_bytes() < 1 * MiB  # nothing left to give back
    finally:
        for p in kept:
            libc.free(p)


def test_prober_reports_malloc_keys_with_their_units(libc):
    prober = memprobe.Prober(probes=["malloc"]).start()
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


def test_trim_option_reports_what_malloc_trim_gave_back(libc):
    probe = MallocProbe(trim=True)
    probe.start()
    kept = _fragment(libc)
    try:
        out = probe.sample()
        assert out["trim_reclaimed_bytes"] >= 10 * MiB
        assert probe.sample()["trim_reclaimed_bytes"] < 1 * MiB
    finally:
        for p in kept:
            libc.free(p)
        probe.stop()


def test_bad_trim_option_names_it():
    with pytest.raises(memprobe.ConfigError, match=r"malloc\.trim: must be a bool"):
        MallocProbe(trim="yes")  # type: ignore[arg-type]


def test_unsupported_platform_disables_the_probe_with_one_warning(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(malloc_probe, "_libc", malloc_probe._Libc())
    assert not malloc_probe.supported()
    prober = memprobe.Prober(probes=["malloc"])
    with pytest.warns(ProbeFailedWarning, match=r"unsupported: glibc malloc statistics exist "
                      r"on Linux only, not darwin"):
        prober.start()
    try:
        values = prober.sample(force=True)
        values = prober.sample(force=True)  # no second warning: warnings are errors here
        assert not any(k.startswith("memprobe/malloc/") for k in values)
    finally:
        prober.stop()
