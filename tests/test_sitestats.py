"""Fast site statistics equal the stdlib's Snapshot.statistics / compare_to."""

from __future__ import annotations

import sys
import sysconfig
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memprobe._sitestats import (
    default_filters,
    site_stats,
    stats_from_snapshot,
    stats_from_traces,
    stdlib_site_stats,
)
from memprobe.probes.tracemalloc import growth

STDLIB_FILE = sysconfig.get_paths()["stdlib"] + "/json/decoder.py"
FILES = ["/x/app/a.py", "/x/app/b.py", STDLIB_FILE, "<unknown>", "/x/app/c.pyc"]
frame = st.tuples(st.sampled_from(FILES), st.integers(0, 5))
traceback = st.lists(frame, min_size=1, max_size=4).map(tuple)
trace = st.builds(
    lambda d, s, tb: (d, s, tb, len(tb)),
    st.integers(0, 2), st.integers(1, 10_000), traceback,
)
traces = st.lists(trace, max_size=60)
filt = st.one_of(
    st.builds(tracemalloc.Filter, st.booleans(), st.sampled_from(["*/app/*", "*a.py", "<unknown>",
                                                                   "*.py"]),
              st.one_of(st.none(), st.integers(0, 5)), st.booleans(),
              st.one_of(st.none(), st.integers(0, 2))),
    st.builds(tracemalloc.DomainFilter, st.booleans(), st.integers(0, 2)),
)
filters = st.lists(filt, max_size=3)
group = st.sampled_from(["lineno", "traceback"])


@settings(max_examples=300, deadline=None)
@given(traces, st.sampled_from(["lineno", "traceback", "user"]), filters)
def test_statistics_equal_stdlib(raw, group_by, flts):
    snap = tracemalloc.Snapshot(raw, 4)
    assert stats_from_traces(raw, group_by, flts) == stats_from_snapshot(snap, group_by, flts)


@settings(max_examples=200, deadline=None)
@given(traces)
def test_user_sites_keep_every_byte_and_name_a_user_line_first(raw):
    by_line = stats_from_traces(raw, "lineno")
    by_user = stats_from_traces(raw, "user")
    assert sum(s for s, _ in by_user.values()) == sum(s for s, _ in by_line.values())
    assert sum(n for _, n in by_user.values()) == sum(n for _, n in by_line.values())
    for key in by_user:
        *callers, allocating = key.split("--")
        assert allocating in by_line  # the allocating line is always named, last
        if callers:  # a library line, named after the user's line that called it
            assert callers[0].startswith("app/") and allocating.startswith(("json/", "unknown"))


def test_user_site_names_the_nearest_user_frame():
    from memprobe._sitestats import is_library, user_site

    lib = (STDLIB_FILE, 7)
    assert is_library(STDLIB_FILE) and not is_library("/x/app/a.py")
    assert is_library("<frozen importlib._bootstrap>")
    assert user_site((("/x/app/a.py", 3), lib)) == "app/a.py:3"
    assert user_site((lib, (STDLIB_FILE, 9), ("/x/app/b.py", 12), ("/x/app/a.py", 1))) == (
        "app/b.py:12--json/decoder.py:7")
    assert user_site((lib, (STDLIB_FILE, 9))) == "json/decoder.py:7"  # the library's own
    import memprobe.probes.objects as own

    # memprobe's own allocations made in a library are not the user's: left out.
    assert user_site((lib, (own.__file__, 59), ("/x/app/a.py", 1))) is None


def test_code_without_a_file_is_the_users():
    """``python -c``, standard input and notebook cells are the user's code; a file of the
    user's that runs such code (a generated ``__init__``) is named before it."""
    from memprobe._sitestats import is_library, user_site

    lib = (STDLIB_FILE, 7)
    for pseudo in ("<string>", "<stdin>", "<ipython-input-3-5e2a1b>", "<console>"):
        assert not is_library(pseudo)
    import memprobe.leaks as own

    # python -c running assert_no_leak: the <string> line, though memprobe called it.
    assert user_site((lib, ("<string>", 5), (own.__file__, 120))) == "string:5--json/decoder.py:7"
    assert user_site((("<stdin>", 4), (own.__file__, 120))) == "stdin:4"
    assert user_site((("<string>", 2), ("/x/app/a.py", 9))) == "app/a.py:9--string:2"
    assert user_site((lib, ("<ipython-input-3-5e2a1b>", 4))) == (
        "ipython-input-3-5e2a1b:4--json/decoder.py:7")


@settings(max_examples=200, deadline=None)
@given(traces, traces, group, st.integers(1, 10))
def test_growth_equals_compare_to(old, new, group_by, top):
    old_snap, new_snap = tracemalloc.Snapshot(old, 4), tracemalloc.Snapshot(new, 4)
    ours = growth(stats_from_traces(old, group_by), stats_from_traces(new, group_by), top)
    # compare_to gives one diff per traceback; sites that format alike are summed.
    from memprobe._sitestats import site_key

    agg: dict[str, list[int]] = {}
    for d in new_snap.compare_to(old_snap, group_by):
        tb = d.traceback if group_by == "traceback" else d.traceback[:1]
        a = agg.setdefault(site_key(tb), [0, 0, 0])
        a[0] += d.size
        a[1] += d.size_diff
        a[2] += d.count_diff
    expected = sorted(
        ((k, sd, cd) for k, (size, sd, cd) in agg.items() if sd > 0 and size > 0),
        key=lambda t: (-t[1], t[0]),
    )[:top]
    assert ours == expected


def test_live_tracing_matches_stdlib_path():
    """Real allocations: the fast path finds the same sites as take_snapshot()."""
    tracemalloc.start(3)
    try:
        held = [bytearray(1000) for _ in range(2000)]  # noqa: F841
        line = test_live_tracing_matches_stdlib_path.__code__.co_firstlineno + 4
        flts = default_filters()
        fast = site_stats("lineno", flts)
        slow = stdlib_site_stats("lineno", flts)
        site = next(k for k in fast if k.endswith(f"test_sitestats.py:{line}"))
        # both paths ran at slightly different moments: the held blocks are identical
        assert fast[site] == slow[site]
        assert fast[site][1] >= 2000 and fast[site][0] >= 2000 * 1000
        tb = site_stats("traceback", flts)
        assert any(f"test_sitestats.py:{line}" in k for k in tb)
    finally:
        tracemalloc.stop()


def test_a_sample_sets_off_no_collection_and_leaves_the_collector_as_it_was():
    """The copy of 60,000 traces is a tuple per block, each tracked by the collector: none
    sets off a collection while the copy is alive (before, 250 of them, of every
    generation, which the gc probe counted as the program's), and the collector is left
    on, or off, as it was. What is left is at most one collection of the youngest
    generation after a sample: the tuples that went to their free lists do not give back
    their count."""
    import gc

    from memprobe._sitestats import SiteGrouper

    generations: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            generations.append(info["generation"])

    tracemalloc.start(1)
    try:
        held = [[i] for i in range(30_000)]  # noqa: F841  (a list and its buffer each)
        line = sys._getframe().f_lineno - 1
        grouper = SiteGrouper("lineno", default_filters())
        grouper.site_stats()  # keeps the tracebacks it saw
        gc.collect()
        gc.callbacks.append(seen)
        for enabled in (True, False, True):
            (gc.enable if enabled else gc.disable)()
            stats = grouper.site_stats()
            assert gc.isenabled() is enabled
            site = next(k for k in stats if k.endswith(f"test_sitestats.py:{line}"))
            assert stats[site][1] >= 60_000
        assert len(generations) <= 2 and set(generations) <= {0}, generations
    finally:
        if seen in gc.callbacks:
            gc.callbacks.remove(seen)
        gc.enable()
        tracemalloc.stop()


def test_bad_group_by():
    with pytest.raises(ValueError, match="group_by"):
        stats_from_traces([], "filename")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(trace, st.integers(1, 700)), max_size=8), group, filters)
def test_many_identical_blocks_equal_stdlib(runs, group_by, flts):
    """Hundreds of blocks per site (counts past the small-int cache), fed as an iterator."""
    raw = [t for t, n in runs for _ in range(n)]
    snap = tracemalloc.Snapshot(raw, 4)
    expected = stats_from_snapshot(snap, group_by, flts)
    assert stats_from_traces(raw, group_by, flts) == expected
    assert stats_from_traces(iter(raw), group_by, flts) == expected
    assert sum(c for _, c in stats_from_traces(raw, group_by).values()) == len(raw)


def test_equal_traceback_tuples_that_are_distinct_objects_are_one_site():
    a = (0, 10, (("/x/app/a.py", 1),), 1)
    b = (0, 20, tuple([("/x/app/a.py", 1)]), 1)  # equal, not the same object
    assert stats_from_traces([a, b]) == {"app/a.py:1": (30, 2)}  # the last two components


@settings(max_examples=100, deadline=None)
@given(st.lists(traces, min_size=1, max_size=5), st.sampled_from(["lineno", "traceback", "user"]),
       filters)
def test_a_grouper_kept_across_samples_equals_stdlib_at_each(samples, group_by, flts):
    """The sites a SiteGrouper keeps from earlier calls never change a later call's stats."""
    from memprobe._sitestats import SiteGrouper

    grouper = SiteGrouper(group_by, flts)
    for raw in samples:
        snap = tracemalloc.Snapshot(raw, 4)
        assert grouper.stats(raw) == stats_from_snapshot(snap, group_by, flts)


def test_a_grouper_keeps_a_bounded_number_of_tracebacks():
    """Tracebacks whose blocks are gone do not pile up: 60 samples of 300 new ones each."""
    from memprobe._sitestats import SPARE_TRACEBACKS, SiteGrouper

    grouper = SiteGrouper("user", default_filters())
    kept = []
    for i in range(60):
        raw = [(0, 64, ((f"/x/app/gen{i}.py", line),), 1) for line in range(300)]
        assert grouper.stats(raw) == {f"app/gen{i}.py:{line}": (64, 1) for line in range(300)}
        kept.append(len(grouper._sites))
    assert max(kept) <= 2 * 300 + SPARE_TRACEBACKS + 300
    assert min(kept[5:]) < max(kept)  # emptied at times, not only grown


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([f"app/a.py:{i}" for i in range(30)]),
                       st.tuples(st.integers(0, 5), st.integers(1, 3))), st.integers(0, 12))
def test_largest_equals_a_full_sort(stats, top):
    """Ties in size (by name), top beyond the number of sites, top 0."""
    from memprobe.probes.tracemalloc import largest

    assert largest(stats, top) == sorted(stats.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]
