"""Threads, several Probers in one process, and child processes (fork and spawn)."""

from __future__ import annotations

import gc
import itertools
import json
import mmap
import multiprocessing as mp
import os
import pickle
import threading
import tracemalloc

import pytest

import memprobe
from memprobe import _tracing as tm_probe

MB = 2**20
RSS = "memprobe/process/rss_bytes"
TRACED = "memprobe/tracemalloc/traced_bytes"


def new_prober(probes, **kw) -> memprobe.Prober:
    return memprobe.Prober(probes, load_entrypoints=False, **kw)


def errors_in(values) -> dict:
    return {k: v for k, v in values.items() if "/errors/" in k or "/timeouts/" in k}


def memprobe_gc_callbacks() -> list:
    return [cb for cb in gc.callbacks if getattr(cb, "__module__", "").startswith("memprobe")]


def run_thread(target, *args) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``target`` in a thread that keeps whatever it raises (warnings are errors)."""
    raised: list[BaseException] = []

    def wrapped() -> None:
        try:
            target(*args)
        except BaseException as exc:
            raised.append(exc)

    t = threading.Thread(target=wrapped, daemon=True)
    t.start()
    return t, raised


# -- threads -------------------------------------------------------------------------------
def test_background_thread_samples_while_the_main_thread_allocates() -> None:
    prober = new_prober(["process", "gc", "tracemalloc", "objects"], history=100_000)
    prober.start()
    stop = threading.Event()
    holding = threading.Event()
    seen_while_holding: list[dict] = []
    base = prober.sample(step=0)

    def sampler() -> None:
        step = 1
        while not stop.is_set():
            values = prober.sample(step=step)
            step += 1
            if holding.is_set():
                seen_while_holding.append(values)

    t, raised = run_thread(sampler)
    try:
        for _ in range(10):  # churn: dicts, lists and bytes allocated and freed
            junk = [{"i": i, "s": str(i) * 5} for i in range(20_000)]
            junk.append(bytes(64 * 1024))
            del junk
        # One block over 32 MiB: glibc maps it apart and freeing it does not raise malloc's
        # mmap threshold (which would change rss figures of later tests in this process).
        held = bytearray(64 * MB)
        held[:: 4096] = b"x" * len(held[:: 4096])  # touched: counted in rss
        holding.set()
        while len(seen_while_holding) < 3 and t.is_alive():
            threading.Event().wait(0.01)
        del held
    finally:
        stop.set()
        t.join(60)
        prober.stop()
    assert not t.is_alive()
    assert not raised, raised
    history = list(prober.history)
    assert len(history) > 10
    steps = [s.step for s in history]
    assert steps == list(range(len(history)))  # in order, none lost
    times = [s.time_seconds for s in history]
    assert times == sorted(times)
    for s in history:
        assert s.pid == os.getpid()
        assert s.values[RSS] > 10 * MB and s.values[TRACED] > 0
        assert not errors_in(s.values), s.values
        assert s.values["memprobe/objects/total_count"] > 1000
    # The thread saw what the main thread held: 64 MiB more traced and resident memory.
    assert max(v[TRACED] for v in seen_while_holding) - base[TRACED] >= 60 * MB
    assert max(v[RSS] for v in seen_while_holding) - base[RSS] >= 48 * MB
    assert not tracemalloc.is_tracing() and not memprobe_gc_callbacks()


@pytest.mark.parametrize("isolate", [False, True], ids=["inline", "isolated"])
def test_two_threads_sample_the_same_prober(isolate: bool) -> None:
    opts = {"isolate": True, "time_limit_seconds": 10.0} if isolate else {}
    probes = {"process": opts, "gc": {}, "tracemalloc": {"top": 3, "every": 5}}
    prober = new_prober(probes, history=10_000)
    n = 200
    with prober:
        threads = [run_thread(lambda k=k: [prober.sample(step=k * n + i) for i in range(n)])
                   for k in range(2)]
        for t, _ in threads:
            t.join(120)
    for t, raised in threads:
        assert not t.is_alive() and not raised, raised
    history = list(prober.history)
    assert len(history) == 2 * n and prober._calls == 2 * n
    for k in range(2):  # each thread's samples in its own order, every one kept
        mine = [s.step for s in history if k * n <= s.step < (k + 1) * n]
        assert mine == list(range(k * n, (k + 1) * n))
    for s in history:
        assert s.values[RSS] > 0 and "memprobe/gc/gen0/count" in s.values
        assert not errors_in(s.values), s.values
    assert [s.time_seconds for s in history] == sorted(s.time_seconds for s in history)
    assert sum(TRACED in s.values for s in history) == 2 * n // 5  # its every= held
    assert not tracemalloc.is_tracing()


# -- several Probers share tracemalloc ----------------------------------------------------
@pytest.mark.parametrize("stop_order", list(itertools.permutations(range(3))))
def test_probers_do_not_stop_each_others_tracing(stop_order: tuple[int, ...]) -> None:
    assert not tracemalloc.is_tracing()
    probers = [new_prober(["tracemalloc"]) for _ in range(3)]
    for i, p in enumerate(probers):  # started one after another, sampling in between
        p.start()
        for q in probers[: i + 1]:
            assert TRACED in q.sample()
    for n, i in enumerate(stop_order):
        probers[i].stop()
        left = [probers[j] for j in stop_order[n + 1 :]]
        assert tracemalloc.is_tracing() == bool(left)
        for q in left:  # the others still trace and still sample
            values = q.sample()
            assert values[TRACED] > 0 and not errors_in(values), values
    assert not tracemalloc.is_tracing()
    assert tm_probe._users == 0


def test_a_window_closing_does_not_stop_another_probers_tracing() -> None:
    windowed = new_prober({"tracemalloc": {"window_steps": 1, "period_steps": 2}})
    steady = new_prober(["tracemalloc"])
    with windowed, steady:
        for _ in range(6):  # windows open and close; the steady one keeps tracing
            windowed.sample()
            assert tracemalloc.is_tracing()
            values = steady.sample()
            assert values[TRACED] > 0 and not errors_in(values)
    assert not tracemalloc.is_tracing()


def test_probers_started_and_stopped_from_many_threads() -> None:
    def cycle() -> None:
        for _ in range(50):
            with new_prober(["tracemalloc"]) as p:
                p.sample()
                assert tracemalloc.is_tracing()

    threads = [run_thread(cycle) for _ in range(4)]
    for t, _ in threads:
        t.join(120)
    for t, raised in threads:
        assert not t.is_alive() and not raised, raised
    assert not tracemalloc.is_tracing() and tm_probe._users == 0


@pytest.mark.parametrize("stop_order", [(0, 1), (1, 0)])
def test_tracing_the_user_started_is_left_on_and_its_peak_kept(stop_order) -> None:
    tracemalloc.start()
    try:
        probers = [new_prober(["tracemalloc"]).start() for _ in range(2)]
        blob = bytes(40 * MB)
        del blob
        for p in probers:
            assert p.sample()[TRACED] > 0
        # memprobe resets the peak only of tracing it started: the user's peak is theirs.
        assert tracemalloc.get_traced_memory()[1] >= 32 * MB
        for i in stop_order:
            probers[i].stop()
        assert tracemalloc.is_tracing()
        assert not tm_probe._started_by_memprobe
    finally:
        tracemalloc.stop()


def test_user_stopping_tracing_under_memprobe_is_counted_not_raised() -> None:
    with new_prober(["process", "tracemalloc"]) as prober:
        prober.sample()
        tracemalloc.stop()  # the user's code stops tracing memprobe started
        with pytest.warns(memprobe.ProbeFailedWarning, match="tracemalloc"):
            values = prober.sample()
        assert values["memprobe/errors/tracemalloc"] == 1
        assert values[RSS] > 0  # the other probe's values are kept
        tracemalloc.start()  # the user starts tracing again, for themselves
    try:
        assert tracemalloc.is_tracing()  # memprobe's stop() left the user's tracing on
        assert tm_probe._users == 0
    finally:
        tracemalloc.stop()


# -- child processes -------------------------------------------------------------------------
def _statm_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _fork_child(prober: memprobe.Prober, conn) -> None:
    before = _statm_rss()
    # Fresh pages from an anonymous mapping, each written: resident and the child's own
    # (a malloc'd buffer may reuse heap pages already resident, shared with the parent).
    held = mmap.mmap(-1, 64 * MB)
    for offset in range(0, 64 * MB, mmap.PAGESIZE):
        held[offset] = 120
    values = prober.sample(step=100)
    conn.send({"pid": os.getpid(), "sample_pid": prober.history[-1].pid, "rss": values[RSS],
               "history": [(s.pid, s.step) for s in prober.history],
               "fraction": values.get("memprobe/overhead/fraction"),
               "rss_before": before, "rss_statm": _statm_rss(),
               "errors": errors_in(values), "traced": values[TRACED]})
    prober.stop()
    conn.send({"tracing": tracemalloc.is_tracing(), "gc": len(memprobe_gc_callbacks())})
    held.close()


def test_forked_child_samples_itself_and_writes_its_own_file(tmp_path) -> None:
    prober = new_prober(["process", "gc", "tracemalloc"], sink=tmp_path / "s-{pid}.jsonl")
    ctx = mp.get_context("fork")
    with prober:
        rss_parent_before = prober.sample(step=0)[RSS]
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_fork_child, args=(prober, child))
        proc.start()
        got = parent.recv() if parent.poll(60) else None
        after = parent.recv() if parent.poll(60) else None
        proc.join(60)
        rss_parent = prober.sample(step=1)[RSS]
        prober.sample(step=2)
    assert got is not None and after is not None, "the forked child did not report"
    assert proc.exitcode == 0
    assert got["pid"] == got["sample_pid"] != os.getpid()
    # The child's history holds its own sample only: the parent's are the parent's.
    assert got["history"] == [(got["pid"], 100)]
    # The overhead fraction restarts in the child: its first sample opens its own window.
    assert got["fraction"] is None
    assert not got["errors"] and got["traced"] > 0
    # /proc/<child>/statm, not the parent's: the child's 64 MiB are in it.
    assert got["rss"] - got["rss_before"] >= 60 * MB
    assert abs(got["rss"] - got["rss_statm"]) < 4 * MB
    # The parent's sample is the parent's: the child's 64 MiB are not in it. (Not
    # rss_parent < child rss: a forked child's rss can read lower than its parent's,
    # as file-backed pages are not counted in the child until it touches them.)
    assert rss_parent - rss_parent_before < 32 * MB
    assert after == {"tracing": False, "gc": 0}  # the child's stop() cleans up the child
    assert tracemalloc.is_tracing() is False  # and the parent's own stop() the parent
    mine = tmp_path / f"s-{os.getpid()}.jsonl"
    theirs = tmp_path / f"s-{got['pid']}.jsonl"
    assert sorted(tmp_path.iterdir()) == sorted([mine, theirs])
    lines = [json.loads(line) for line in mine.read_text().splitlines()]
    assert [(r["step"], r["pid"]) for r in lines] == [(i, os.getpid()) for i in range(3)]
    (child_line,) = [json.loads(line) for line in theirs.read_text().splitlines()]
    assert child_line["step"] == 100 and child_line["pid"] == got["pid"]


def test_fork_while_another_thread_samples_does_not_hang_the_child() -> None:
    # A thread holding the Prober's lock at the fork used to leave it held forever
    # in the child, whose first sample() then hung.
    prober = new_prober(["process", "gc", "tracemalloc"]).start()
    stop = threading.Event()
    t, raised = run_thread(lambda: [prober.sample() for _ in iter(stop.is_set, True)])
    ctx = mp.get_context("fork")
    reports = []
    try:
        for _ in range(4):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_fork_child, args=(prober, child))
            proc.start()
            reports.append(parent.recv() if parent.poll(15) else None)
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
    finally:
        stop.set()
        t.join(60)
        prober.stop()
    assert not raised, raised
    assert all(r is not None and not r["errors"] for r in reports), reports
    assert not tracemalloc.is_tracing()


def spawn_child_builds_its_own_prober(queue) -> None:
    """Run in a spawned interpreter (module level so that spawn can import it)."""
    import gc as gc_
    import tracemalloc as tm

    import memprobe as mp_

    with mp_.Prober(["process", "gc", "tracemalloc"], load_entrypoints=False) as prober:
        for i in range(3):
            values = prober.sample(step=i)
    queue.put({
        "pid": os.getpid(), "rss": values[RSS], "traced": values[TRACED],
        "errors": errors_in(values), "steps": [s.step for s in prober.history],
        "tracing_after": tm.is_tracing(),
        "gc_after": [cb for cb in gc_.callbacks if "memprobe" in getattr(cb, "__module__", "")],
    })


def test_spawned_child_builds_a_working_prober() -> None:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=spawn_child_builds_its_own_prober, args=(queue,))
    proc.start()
    got = queue.get(timeout=120)
    proc.join(60)
    assert proc.exitcode == 0
    assert got["pid"] != os.getpid() and got["rss"] > 5 * MB and got["traced"] > 0
    assert got["steps"] == [0, 1, 2] and not got["errors"]
    assert got["tracing_after"] is False and got["gc_after"] == []


def test_a_prober_is_not_picklable() -> None:
    prober = new_prober(["process", "gc"])
    with pytest.raises(TypeError, match="not picklable; build one in the process"):
        pickle.dumps(prober)
    proc = mp.get_context("spawn").Process(target=print, args=(prober,))
    with pytest.raises(TypeError, match="not picklable"):
        proc.start()  # what a user passing a Prober to a spawned child sees


# -- global state after stop() ---------------------------------------------------------------
def test_stop_leaves_gc_callbacks_and_tracemalloc_clean() -> None:
    before = list(gc.callbacks)
    probers = [new_prober(["process", "gc", "tracemalloc", "objects"]) for _ in range(3)]
    for p in probers:
        p.start()
    assert len(memprobe_gc_callbacks()) == 3
    for p in probers:
        p.sample()
        gc.collect()
    for p in probers:
        p.stop()
        p.stop()  # twice is fine
    assert gc.callbacks == before
    assert not tracemalloc.is_tracing() and tm_probe._users == 0
    for fn in (memprobe.watch(range(3), probes=["gc", "tracemalloc"]),):
        assert list(fn) == [0, 1, 2]
    assert gc.callbacks == before and not tracemalloc.is_tracing()


def test_a_prober_never_stopped_cleans_up_when_collected() -> None:
    """A Prober dropped without stop() (RLlib never stops its callbacks' Probers)
    leaves no gc callback and no tracing behind once it is collected."""
    before = list(gc.callbacks)
    prober = new_prober(["process", "gc", "tracemalloc"])
    prober.sample()
    assert len(memprobe_gc_callbacks()) == 1 and tracemalloc.is_tracing()
    del prober
    gc.collect()
    assert gc.callbacks == before
    assert not tracemalloc.is_tracing() and tm_probe._users == 0

    # Collected while another thread holds the tracing lock: the release is owed,
    # never waited for (a collection can run inside acquire_tracing), and paid later.
    prober = new_prober(["tracemalloc"])
    prober.sample()
    with tm_probe._lock:
        del prober
        gc.collect()
        assert tracemalloc.is_tracing() and tm_probe._owed
    other = new_prober(["tracemalloc"])
    other.sample()  # its acquire pays what was owed
    assert not tm_probe._owed and tm_probe._users == 1
    other.stop()
    assert not tracemalloc.is_tracing() and tm_probe._users == 0
