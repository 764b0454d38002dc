"""The key format, both ways, for any prefix (memprobe.keys)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memprobe import keys

PART = st.text(st.sampled_from("ab_.-:/ é"), min_size=1, max_size=12)


@given(prefix=st.sampled_from(["", "memprobe", "memprobe/driver", "memprobe/learner_3"]),
       probe=PART.filter(lambda p: "/" not in keys.sanitize_key(p)), metric=PART)
def test_split_key_takes_apart_what_make_key_builds(prefix, probe, metric):
    key = keys.make_key(prefix, probe, metric)
    parts = keys.split_key(key, prefix)
    assert parts == (prefix, keys.sanitize_key(probe), keys.sanitize_key(metric))
    assert keys.short_key(key, prefix) == f"{parts.probe}/{parts.metric}"
    assert keys.prefix_path(prefix) + keys.short_key(key, prefix) == key


def test_a_key_moves_from_one_prefix_to_another():
    """What the RLlib driver does with a Learner's keys (memprobe/learner -> learner_<i>)."""
    key = keys.make_key("memprobe/learner", "tracemalloc", "top/ray/rllib/core/x.py:12/size_bytes")
    moved = keys.prefix_path("memprobe/learner_1") + keys.short_key(key, "memprobe/learner")
    assert moved == "memprobe/learner_1/tracemalloc/top/ray/rllib/core/x.py:12/size_bytes"
    with pytest.raises(ValueError, match="does not start with the prefix"):
        keys.split_key("episode_return_mean", "memprobe")


@pytest.mark.parametrize("metric, sections, name", [
    ("top/ray/rllib/env.py:40/size_bytes", keys.SITE_SECTIONS, "ray/rllib/env.py:40"),
    ("survivors/builtins.dict/count", keys.SITE_SECTIONS, "builtins.dict"),
    ("rss_bytes", keys.SITE_SECTIONS, None),
    ("top/size_bytes", keys.SITE_SECTIONS, None),
    ("culprit/ray/rllib/env.py:40/rate_per_hour", keys.SITE_SECTIONS, None),
    ("culprit/ray/rllib/env.py:40/rate_per_hour", ("culprit",), "ray/rllib/env.py:40"),
    ("culprit/native/rate_per_hour", ("culprit",), "native"),
    ("suspect", ("culprit",), None),
])
def test_site_name_reads_the_name_inside_a_section(metric, sections, name):
    assert keys.site_name(metric, sections) == name


def test_library_sites_are_told_from_the_users_own_code() -> None:
    from memprobe.keys import is_library_site

    for site in ("collections/__init__.py:690", "numpy/_core/numeric.py:232",
                 "numpy/_core/numeric.py:232--app.py:12", "<frozen importlib._bootstrap>:241",
                 "json/decoder.py:353 → app.py:4"):
        assert is_library_site(site), site
    # Code without a file is the user's: python -c, standard input, notebook cells.
    for site in ("app.py:12", "<string>:3", "<stdin>:1", "<ipython-input-3-5f1c>:2",
                 "app.py:12--numpy/_core/numeric.py:232"):
        assert not is_library_site(site), site
    # As keys hold them, brackets dropped: ``string`` is not the standard library's module.
    for site in ("string:3", "string:5--json/decoder.py:353", "string:5 → numpy/_core/numeric.py:232",
                 "stdin:1", "console:2", "ipython-input-3-5f1c:2"):
        assert not is_library_site(site), site
    for site in ("frozen_abc:106", "string.py:120", "frozen_importlib._bootstrap:241--app.py:3"):
        assert is_library_site(site), site


SITE = st.text(st.sampled_from("ab_.:/é-"), min_size=1, max_size=16).filter(
    lambda s: keys.sanitize_key(s) not in ("_",))


@given(prefix=st.sampled_from(["", "memprobe", "memprobe/driver"]),
       probe=st.sampled_from(["tracemalloc", "objects", "memray"]),
       section=st.sampled_from(keys.SITE_SECTIONS), site=SITE,
       stat=st.sampled_from(["size_bytes", "count"]))
def test_split_site_key_takes_apart_what_site_metric_builds(prefix, probe, section, site, stat):
    key = keys.make_key(prefix, probe, keys.site_metric(section, site, stat))
    found = keys.split_site_key(key, prefix)
    assert found == (probe, keys.SiteParts(section, keys.sanitize_key(site), stat))
    assert keys.metric_path(keys.split_short(keys.short_key(key, prefix))[1]) == [
        section, keys.sanitize_key(site), stat]


@given(prefix=st.sampled_from(["", "memprobe", "memprobe/env_runner"]),
       short=st.sampled_from(["process/rss_bytes", "tracemalloc/filtered_bytes",
                              "leak/hours_to_oom"]))
def test_key_of_and_split_short_are_inverse(prefix, short):
    key = keys.key_of(prefix, short)
    assert keys.short_key(key, prefix) == short
    assert "/".join(keys.split_short(short)) == short


def test_leak_and_culprit_keys():
    assert keys.leak_key("memprobe", "suspect") == "memprobe/leak/suspect"
    assert keys.leak_key("memprobe", "process/rss_bytes", "rate_per_hour") == (
        "memprobe/leak/process/rss_bytes/rate_per_hour")
    key = keys.culprit_key("memprobe", "my env.py:3 → numpy/x.py:2")
    assert key == "memprobe/leak/culprit/my_env.py:3_numpy/x.py:2/rate_per_hour"
    assert keys.site_name(keys.split_key(key, "memprobe").metric, ("culprit",)) == (
        "my_env.py:3_numpy/x.py:2")
    assert keys.is_leak_key("memprobe/driver/leak/hours_to_oom", "hours_to_oom")
    assert not keys.is_leak_key("memprobe/leak/hours_to_oom_max", "hours_to_oom")
    assert keys.join_prefix("memprobe", "learner_2") == "memprobe/learner_2"
    assert keys.split_short("rss_bytes") == ("", "rss_bytes")


def test_library_types_are_told_from_the_users():
    for name in ("cell", "dict", "collections.Counter",
                 "re.Pattern", "numpy.ndarray"):
        assert keys.is_library_type(name), name
    for name in ("my_env.Note", "__main__.Record", "memprobe_test_leaky_env.StepNote"):
        assert not keys.is_library_type(name), name


PY_FRAME = st.one_of(
    st.builds(lambda f, n: f"{f}.py:{n}",
              st.sampled_from(["app", "numpy/_core/numeric", "a/b"]), st.integers(1, 99_999)),
    st.builds(lambda f, n: f"{f}:{n}", st.sampled_from(["<string>", "string", "<stdin>",
                                                       "<ipython-input-3-ab12>"]),
              st.integers(1, 999)))
C_FRAME = st.sampled_from(["leaky_alloc", "PyMem_RawMalloc", "std::vector<int>::push_back",
                           "upb_Arena_Malloc", "_ZN3foo3barEv"])


@given(frames=st.lists(PY_FRAME, min_size=1, max_size=3), c=C_FRAME,
       joint=st.sampled_from(["--", " → "]))
def test_a_chain_ends_in_a_c_frame_exactly_when_memray_named_a_c_function_last(
        frames, c, joint) -> None:
    """One predicate for "the last frame is a C function" (the verdicts' hint that memray
    read no C stack, the RLlib adapter's native stacks): Python frames, ``<string>`` ones
    and their key spelling ``string:3`` among them, are never C frames."""
    chain = joint.join(frames)
    assert not keys.ends_in_c_frame(chain)
    assert keys.ends_in_c_frame(f"{chain}{joint}{c}")
    assert keys.ends_in_c_frame(c)
    assert not keys.ends_in_c_frame("unknown") and not keys.ends_in_c_frame("")


def test_the_rllib_adapters_native_stacks_use_the_c_frame_predicate() -> None:
    """A native stack from code run by ``python -c`` (``string:3`` in a key) ends in a C
    function; a site of Python frames alone, or ``native``, is no native stack."""
    leak = pytest.importorskip("memprobe_rllib._leak")
    assert leak._native_stacks(["string:3--leaky_alloc", "app.py:4", "native",
                                "app.py:4--numpy/_core/numeric.py:232"]) == [
        "string:3 → leaky_alloc"]


def test_the_verdicts_use_the_c_frame_predicate() -> None:
    """memray's stack from code run by ``python -c`` that ends in a C function gives no
    hint to read C stacks (it counted as Python frames alone)."""
    from memprobe.leak._kinds import NATIVE_TRACES_HINT, _native
    from memprobe.leak._windows import WindowEvidence

    seen = WindowEvidence("memray", 3, 2.0, 65_536.0, (("<string>:3--leaky_alloc", 65_536.0),))
    _, culprits, note = _native("process/rss_bytes", 65_536.0, [seen], "")
    assert culprits == ("<string>:3 → leaky_alloc",) and NATIVE_TRACES_HINT not in note


@given(st.from_regex(r"[a-z_/]{1,12}\.py", fullmatch=True), st.integers(1, 10**6),
       st.lists(st.from_regex(r"[a-z_]{1,8}(\.py:[0-9]{1,4})?", fullmatch=True), max_size=3))
def test_a_sites_first_frame_and_line_read_the_same_in_a_key_and_a_report(file, line, rest):
    """``first_frame`` and ``frame_line`` of a chain, in key form (``--``) or as a report
    shows it (``→``): the first frame and its line, whatever follows it."""
    site = "--".join([f"{file}:{line}", *rest])
    for chain in (site, keys.format_culprit(site)):
        assert keys.first_frame(chain) == f"{file}:{line}"
        assert keys.frame_line(keys.first_frame(chain)) == line
    assert keys.frame_line("leaky_alloc") is None
    assert keys.frame_line("unknown") is None
