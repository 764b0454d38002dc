"""flatten and sanitize_key: laws checked with hypothesis, errors that name the key."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import memprobe
from memprobe import SiteKeyCap, SiteMap

SAFE = re.compile(r"^[A-Za-z0-9_.\-/:]+$")

names = st.text(min_size=1, max_size=12)
numbers = st.one_of(st.integers(-(2**62), 2**62), st.floats(allow_nan=False, allow_infinity=False))
trees = st.recursive(
    numbers,
    lambda children: st.dictionaries(names, children, min_size=1, max_size=4),
    max_leaves=20,
)


@given(st.text(max_size=40))
def test_sanitize_is_idempotent_and_safe(s: str) -> None:
    once = memprobe.sanitize_key(s)
    assert memprobe.sanitize_key(once) == once
    assert SAFE.match(once), once
    assert not any(c.isspace() for c in once)


@given(st.dictionaries(names, trees, min_size=1, max_size=4))
def test_flatten_keys_are_safe_unique_and_deterministic(data: dict) -> None:
    try:
        flat = memprobe.flatten(data)
    except memprobe.KeyCollisionError as exc:
        a, b = exc.sources
        assert a != b  # two different inputs, both named
        assert exc.key in str(exc)
        return
    assert all(k.startswith("memprobe/") for k in flat)
    assert all(SAFE.match(k) for k in flat)
    # order of the input does not matter; the output order is stable
    reversed_input = dict(reversed(list(data.items())))
    assert list(memprobe.flatten(reversed_input).items()) == list(flat.items())
    assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in flat.values())


def _leaves(tree: object) -> list[float]:
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _leaves(v)]
    return [tree]  # type: ignore[list-item]


clean = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True)
clean_trees = st.recursive(
    numbers, lambda c: st.dictionaries(clean, c, min_size=1, max_size=4), max_leaves=20
)


@given(st.dictionaries(clean, clean_trees, min_size=1))
def test_flatten_keeps_every_leaf_of_clean_keys(data: dict) -> None:
    flat = memprobe.flatten(data)
    assert sorted(flat.values()) == sorted(_leaves(data))


def test_nested_and_sequences() -> None:
    flat = memprobe.flatten({"process": {"rss_bytes": 1, "per_gen": [3, 4]}})
    assert flat == {
        "memprobe/process/per_gen/0": 3,
        "memprobe/process/per_gen/1": 4,
        "memprobe/process/rss_bytes": 1,
    }
    assert memprobe.flatten({"a": {"b": 1}}, prefix="", sep=".") == {"a.b": 1}


def test_collision_names_both_inputs() -> None:
    with pytest.raises(memprobe.KeyCollisionError) as info:
        memprobe.flatten({"p": {"a b": 1, "a_b": 2}})
    assert "p/a b" in str(info.value) and "p/a_b" in str(info.value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "12", None, object()])
def test_bad_values_name_the_key(bad: object) -> None:
    with pytest.raises(memprobe.MetricValueError) as info:
        memprobe.flatten({"p": {"x": {"y_bytes": bad}}})
    assert info.value.key == "p/x/y_bytes"


def test_non_string_key_is_rejected() -> None:
    with pytest.raises(memprobe.MetricValueError, match="not a string"):
        memprobe.flatten({"p": {(1, 2): 3}})


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=40), st.integers(0, 10))
def test_key_cap_is_sticky_and_preserves_totals(sizes: list[int], cap_n: int) -> None:
    cap = SiteKeyCap(cap_n)
    sites = SiteMap((f"file.py:{i}", {"size_bytes": s}) for i, s in enumerate(sizes))
    flat = memprobe.flatten({"t": {"top": sites}}, site_key_cap=cap)
    assert sum(flat.values()) == sum(sizes)
    named = [k for k in flat if not k.startswith("memprobe/t/top/other")]
    assert len(named) == min(cap_n, len(sizes))
    # sticky: the same first sites keep their keys on the next sample
    again = memprobe.flatten({"t": {"top": sites}}, site_key_cap=cap)
    assert [k for k in again if "other" not in k] == named


def _emit_top(cap: SiteKeyCap, sites: dict[str, int], section: str = "top") -> set[str]:
    """One emission of ``t/<section>``: the sites named as themselves."""
    flat = memprobe.flatten({"t": {section: SiteMap((s, {"size_bytes": b})
                                                    for s, b in sites.items())}},
                            site_key_cap=cap)
    assert sum(flat.values()) == sum(sites.values())
    return {k.split("/")[-2] for k in flat if f"/{section}/other/" not in k}


def test_key_cap_gives_a_stale_slot_to_a_key_refused_in_a_row() -> None:
    # The start-up's sites take the slots, then are gone; the site that stays (the
    # leak) is named once they have been absent STALE_EMISSIONS emissions.
    cap = SiteKeyCap(2)
    for _ in range(3):
        assert _emit_top(cap, {"import_a.py:1": 10, "import_b.py:1": 10}) == {
            "import_a.py:1", "import_b.py:1"}
    named_from = None
    for i in range(1, 30):
        if _emit_top(cap, {"leak.py:4": 1000 * i}) and named_from is None:
            named_from = i
    assert named_from == SiteKeyCap.STALE_EMISSIONS + 1
    assert cap.replaced == 1 and len(cap) == 2


def test_key_cap_keeps_the_slots_of_keys_still_emitted() -> None:
    cap = SiteKeyCap(2)
    for i in range(40):  # a and b in every emission, c refused in every one
        assert _emit_top(cap, {"a.py:1": 5, "b.py:1": 5, "c.py:1": 1000 + i}) == {
            "a.py:1", "b.py:1"}
    assert cap.replaced == 0


def test_key_cap_judges_staleness_by_the_key_s_own_map() -> None:
    # A probe sampled rarely (its map emitted once) keeps its key while another
    # map is emitted many times: absent from none of its own map's emissions.
    cap = SiteKeyCap(1)
    assert _emit_top(cap, {"Foo": 1}, section="types") == {"Foo"}
    for _ in range(3 * SiteKeyCap.STALE_EMISSIONS):
        assert _emit_top(cap, {"leak.py:4": 10}) == set()
    assert cap.replaced == 0


def test_key_cap_ignores_a_key_refused_once() -> None:
    cap = SiteKeyCap(1)
    _emit_top(cap, {"start.py:1": 1})
    for i in range(3 * SiteKeyCap.STALE_EMISSIONS):  # a new passing site every emission
        assert _emit_top(cap, {f"pass.py:{i}": 1}) == set()
    assert cap.replaced == 0


@given(st.integers(0, 6),
       st.lists(st.frozensets(st.integers(0, 15), max_size=8), min_size=1, max_size=60))
def test_key_cap_laws(cap_n: int, emissions: list[frozenset[int]]) -> None:
    cap = SiteKeyCap(cap_n)
    ever: set[str] = set()
    held: set[str] = set()  # named, and emitted in every emission since
    for sites in emissions:
        offered = {f"s{i}.py:1": i + 1 for i in sites}
        named = _emit_top(cap, offered)  # totals kept
        assert len(named) <= cap_n and len(cap) <= cap_n
        assert held & offered.keys() <= named  # a key emitted in every emission keeps its slot
        held = (held & offered.keys()) | named
        ever |= named
    assert len(ever) <= 2 * cap_n
    assert cap.replaced <= cap_n


def test_shorten_path_is_relative_to_site_packages_and_cwd(tmp_path, monkeypatch) -> None:
    import pluggy

    assert memprobe.shorten_path(pluggy.__file__) == "pluggy/__init__.py"
    monkeypatch.chdir(tmp_path)
    assert memprobe.shorten_path(str(tmp_path / "train.py")) == "train.py"


# -- the fast path -----------------------------------------------------------------
# flatten records a plan for each result shape; a later call with the same shape
# runs the plan. Whatever the later input (other value
# types, non-finite floats, bools, a key more or less, another order), the result
# must be exactly what the slow path (_walk) gives: same items in the same order,
# or the same error for the same key.

odd_values = st.one_of(
    numbers,
    st.booleans(),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), None, "1", 2**1100]),
    st.floats(min_value=1e307, max_value=1.7e308),  # finite, but their sum overflows
)


def _slow(data: dict) -> object:
    from memprobe._flatten import _walk

    out: dict = {}
    try:
        _walk(data, "memprobe", "", "/", out, {}, None, 0)
    except memprobe.MemprobeError as exc:
        return (type(exc), getattr(exc, "key", None))
    return list(out.items())


def _fast(data: dict) -> object:
    try:
        return list(memprobe.flatten(data).items())
    except memprobe.MemprobeError as exc:
        return (type(exc), getattr(exc, "key", None))


def _mutate(tree: object, draw: st.DrawFn) -> object:
    if not isinstance(tree, dict):
        return draw(odd_values) if draw(st.booleans()) else tree
    items = [(k, _mutate(v, draw)) for k, v in tree.items()]
    choice = draw(st.integers(0, 5))
    if choice == 0 and items:
        items.pop(draw(st.integers(0, len(items) - 1)))
    elif choice == 1:
        items.append((draw(clean), draw(numbers)))
    elif choice == 2:
        items.reverse()
    return dict(items)


@given(st.dictionaries(clean, clean_trees, min_size=1, max_size=3), st.data())
def test_a_recorded_plan_gives_what_the_slow_path_gives(base: dict, data: st.DataObject) -> None:
    for _ in range(3):  # records the plan, then runs it
        assert _fast(base) == _slow(base)
    variant = _mutate(base, data.draw)
    assert _fast(variant) == _slow(variant)


def test_a_plan_is_recorded_and_rejects_what_it_must() -> None:
    from memprobe._flatten import _PLANS, _run_plan

    base = {"gc": {"count": 1, "gen0": {"seconds": 0.5}}}
    memprobe.flatten(base)
    plan = _PLANS[("memprobe", "/", ("gc",))]
    out: dict = {}
    assert _run_plan(base, plan, out)
    assert out == {"memprobe/gc/count": 1, "memprobe/gc/gen0/seconds": 0.5}
    for bad in (True, float("nan"), float("inf"), None, 1.5j):
        assert not _run_plan({"gc": {"count": 1, "gen0": {"seconds": bad}}}, plan, {})
    assert not _run_plan({"gc": {"count": 1, "gen0": {"other": 0.5}}}, plan, {})
    assert not _run_plan({"gc": {"count": 1, "gen0": {"seconds": 0.5, "x": 1}}}, plan, {})
    assert not _run_plan({"gc": {"count": 1, "gen0": SiteMap(seconds=0.5)}}, plan, {})


def test_no_source_is_generated_at_run_time() -> None:
    """The sample path is code a reader can follow: nothing under src/ compiles or
    executes generated source."""
    import pathlib
    import re

    src = pathlib.Path(memprobe.__file__).parents[1]
    found = [f"{p.relative_to(src)}:{n}" for p in sorted(src.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"\b(exec|compile)\(", line) and not re.search(r"re\.compile\(", line)]
    assert found == []
