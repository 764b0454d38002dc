"""Each built-in probe against reality: real allocations, real objects, real files."""

from __future__ import annotations

import gc
import mmap
import tracemalloc

import pytest

import memprobe

MB = 2**20


def test_process_rss_rises_with_50_mb_held() -> None:
    with memprobe.Prober(["process"]) as prober:
        before = prober.sample()["memprobe/process/rss_bytes"]
        # Fresh pages from an anonymous mapping, every page written: a malloc'd buffer
        # may reuse pages a test before freed into the heap, already resident.
        held = mmap.mmap(-1, 50 * MB)
        page = b"\x01" * mmap.PAGESIZE
        for offset in range(0, 50 * MB, mmap.PAGESIZE):
            held[offset:offset + mmap.PAGESIZE] = page
        after = prober.sample()["memprobe/process/rss_bytes"]
        held.close()
    assert after - before >= 50 * MB


def test_tracemalloc_traced_bytes_rise_and_name_the_line() -> None:
    with memprobe.Prober({"tracemalloc": {"top": 5}}) as prober:
        before = prober.sample()["memprobe/tracemalloc/traced_bytes"]
        held = [bytes(MB) for _ in range(50)]  # the allocating line
        values = prober.sample()
        del held
    assert values["memprobe/tracemalloc/traced_bytes"] - before >= 50 * MB
    growth = [k for k in values if k.startswith("memprobe/tracemalloc/growth/")]
    assert any("test_builtin_probes.py:" in k for k in growth), growth
    # short, sanitized site keys: no absolute paths, no spaces
    assert all(" " not in k and "/work/" not in k for k in values)
    assert not tracemalloc.is_tracing()  # it stopped what it started


def test_tracemalloc_leaves_someone_elses_tracing_on() -> None:
    tracemalloc.start()
    try:
        with memprobe.Prober(["tracemalloc"]) as prober:
            prober.sample()
        assert tracemalloc.is_tracing()
    finally:
        tracemalloc.stop()


class Widget:
    pass


def test_objects_probe_reports_10000_new_instances() -> None:
    with memprobe.Prober({"objects": {"top": 50}}) as prober:
        prober.sample()
        widgets = [Widget() for _ in range(10_000)]
        values = prober.sample()
        del widgets
    key = f"memprobe/objects/growth/{__name__}.Widget/count"
    assert values.get(key, 0) >= 10_000, sorted(values)


def test_num_fds_rises_by_50(tmp_path) -> None:
    with memprobe.Prober(["process"]) as prober:
        before = prober.sample()["memprobe/process/num_fds"]
        files = [open(tmp_path / f"f{i}", "w") for i in range(50)]
        after = prober.sample()["memprobe/process/num_fds"]
        for f in files:
            f.close()
        closed = prober.sample()["memprobe/process/num_fds"]
    assert after - before == 50
    assert closed == before


def test_gc_probe_counts_collections_and_time() -> None:
    with memprobe.Prober(["gc"]) as prober:
        before = prober.sample()
        for _ in range(3):
            gc.collect()
        after = prober.sample()
    key = "memprobe/gc/gen2/collections_count"
    assert after[key] - before[key] >= 3
    assert after["memprobe/gc/collection_seconds"] > 0
    assert after["memprobe/gc/collection_seconds_total"] >= after["memprobe/gc/collection_seconds"]
    assert not any(getattr(cb, "__module__", "") == "memprobe.probes.gc"
                   for cb in gc.callbacks)  # stop() removed its callback


class _Kept:
    """A small object of a class of its own, kept by the retained-objects tests."""

    def __init__(self, i: int) -> None:
        self.i = i


def test_gc_blocks_count_retained_small_objects() -> None:
    with memprobe.Prober({"gc": {"blocks": True}}) as prober:
        before = prober.sample()["memprobe/gc/allocated_blocks"]
        kept = [_Kept(i) for i in range(20_000)]
        after = prober.sample()["memprobe/gc/allocated_blocks"]
        del kept
        freed = prober.sample()["memprobe/gc/allocated_blocks"]
    assert after - before >= 20_000  # one block per object, at least
    assert freed < after - 15_000


def test_retained_objects_judged_from_gc_blocks_are_kind_objects() -> None:
    kept: list[_Kept] = []
    with memprobe.Prober({"process": {}, "gc": {"blocks": True}}) as prober:
        for step in range(120):
            kept.extend(_Kept(i) for i in range(300))
            prober.sample(step=step)
        gc.collect()  # a full collection: what tells the blocks kept from cyclic garbage
        prober.sample(step=120)
        report = prober.report()
    v = report.verdicts["memprobe/gc/allocated_blocks"]
    assert v.leak and v.kind == "objects", v.describe()
    assert v.slope_per_step >= 300


def test_process_full_info_adds_uss() -> None:
    with memprobe.Prober({"process": {"full": True}}) as prober:
        values = prober.sample()
    assert 0 < values["memprobe/process/uss_bytes"] <= values["memprobe/process/rss_bytes"]


def test_mallocs_bytes_in_use_leave_out_tracemallocs_own_tables() -> None:
    """tracemalloc takes a trace per traced block from malloc (tens of bytes each): the
    tracer's memory, not the program's. The malloc probe's bytes in use leave it out."""
    from memprobe.probes.malloc import libc, malloc_stats

    if libc().mallinfo2 is None:
        pytest.skip("no mallinfo2 here")
    tracemalloc.start()
    try:
        kept = [[i] for i in range(100_000)]  # 100,000 traced blocks kept
        with memprobe.Prober(["malloc"], load_entrypoints=False) as prober:
            raw = malloc_stats()["in_use_bytes"]
            own = tracemalloc.get_tracemalloc_memory()
            probed = prober.sample()["memprobe/malloc/in_use_bytes"]
        assert own > 4_000_000  # 100,000 traces
        assert abs((raw - probed) - own) < 1_000_000, (raw, probed, own)
        del kept
    finally:
        tracemalloc.stop()
