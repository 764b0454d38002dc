"""A Prober's history: what sample() returns is the caller's, storage does not grow as it fills."""

from __future__ import annotations

import gc

from hypothesis import given, settings
from hypothesis import strategies as st

import memprobe
from memprobe import History

finite = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
)


@settings(max_examples=60, deadline=None)
@given(
    maxlen=st.integers(1, 6),
    rows=st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(-(2**70), 2**70)),
            st.dictionaries(st.sampled_from(["a", "b/c", "d", "e"]), finite, max_size=4),
        ),
        max_size=15,
    ),
)
def test_history_gives_back_exactly_what_was_stored(maxlen: int, rows: list) -> None:
    h = History(maxlen)
    for i, (step, values) in enumerate(rows):
        h.append(float(i), step, 100 + i, values)
    kept = rows[-maxlen:] if rows else []
    got = list(h)
    assert len(h) == len(kept) == len(got)
    for s, (step, values) in zip(got, kept):
        assert s.step == step
        assert s.values == values
        assert [type(v) for v in s.values.values()] == [type(v) for v in values.values()]
        assert list(s.values) == list(values)
    if kept:
        assert h[-1].values == kept[-1][1] and h[0].values == kept[0][1]


def test_many_keys_widen_the_storage() -> None:
    h = History(3)
    for n in (5, 40, 100):
        h.append(0.0, n, 1, {f"k{i}": i for i in range(n)})
    assert [len(s.values) for s in h] == [5, 40, 100]
    assert h[0].values == {f"k{i}": i for i in range(5)}


def test_the_returned_values_cannot_change_history() -> None:
    with memprobe.Prober(["process"]) as prober:
        values = prober.sample(step=0)
        values["memprobe/mine"] = 1
        values["memprobe/process/rss_bytes"] = -1
        stored = prober.history[-1].values
        stored["x"] = 2  # a sample read back is a copy too
    assert "memprobe/mine" not in prober.history[-1].values
    assert prober.history[-1].values["memprobe/process/rss_bytes"] > 0
    assert "x" not in prober.history[-1].values


def test_a_clean_loop_reports_no_leak() -> None:
    """The README's example: a loop that allocates nothing, 1500 samples, one report."""
    gc.collect()
    with memprobe.Prober(probes=["process", "gc"]) as prober:
        for step in range(1500):
            prober.sample(step=step)
    report = prober.report()
    rss = report.get("process/rss_bytes")
    assert rss is not None and rss.status != "insufficient"
    assert not report.has_leak, report.leaking


def test_history_storage_does_not_grow_as_it_fills() -> None:
    """The storage is allocated up front: filling it allocates nothing that stays."""
    import tracemalloc

    prober = memprobe.Prober(["process", "gc"], history=2000)
    with prober:
        # The first samples: keys seen, flatten plans compiled, the judged metrics' tiers
        # made at the first batch of 50 (memprobe's own memory, allocated once).
        for step in range(50):
            prober.sample(step=step)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for step in range(50, 1550):
                prober.sample(step=step)
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    assert len(prober.history) == 1550
    # Besides the rows of the tiers' batch under way (at most 50 samples' judged values,
    # ~12 KB with the default probes), let go when the batch is fed.
    assert grown < 20 * 1500 + 12_288, f"{grown} bytes for 1500 samples"


def test_history_holds_exactly_what_sample_returned_whatever_ran() -> None:
    """Schedules make samples of several shapes (fast samplers, a plugin's probe through
    flatten, forced samples): each stored sample equals the dict that was returned."""
    probes = {"process": {}, "gc": {"every": 3}, "example": {"every": 2}}
    returned = []
    with memprobe.Prober(probes, history=100) as prober:
        for step in range(40):
            v = prober.sample(step=step, force=step % 7 == 0)
            if v:
                returned.append((step, dict(v)))
    stored = [(s.step, s.values) for s in prober.history]
    assert stored == returned
    for (_, a), (_, b) in zip(stored, returned):
        assert [type(x) for x in a.values()] == [type(x) for x in b.values()]


def test_layouts_no_row_uses_are_dropped() -> None:
    """Keys that change every sample (open-ended site keys) keep at most maxlen layouts."""
    h = History(3)
    for i in range(50):
        h.append(float(i), i, 1, {"a": 1, f"site{i}": 2.5})
    assert [s.values for s in h] == [{"a": 1, f"site{i}": 2.5} for i in (47, 48, 49)]
    assert sum(x is not None for x in h._layouts) == 3 and len(h._layout_ids) == 3
    assert len(h._layouts) <= 4  # ids are reused
    h.append(50.0, None, 1, {"big": 2**64 - 1})  # kept aside: no layout kept for it
    assert h[-1].values == {"big": 2**64 - 1} and len(h._layout_ids) == 2
    h.clear()
    assert list(h) == [] and not h._layout_ids
