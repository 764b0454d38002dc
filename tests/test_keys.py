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
