"""Who holds it: referrer chains name the module global, class attribute, closure or cache."""

from __future__ import annotations

import functools
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memprobe
from memprobe.referrers import Chain, chain_of, referrer_chains


class Retained:
    """A type that the tests leak on purpose."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.payload = bytearray(64)


HELD: list[Retained] = []


class Registry:
    entries: list[Retained] = []


def _make_recorder():
    seen: list[Retained] = []

    def record(x: Retained) -> None:
        seen.append(x)

    return record


#: The walk's time budget in tests that expect a complete chain: generous, since a loaded
#: machine (CI, xdist) can make gc.get_referrers() over a big heap take seconds.
SLOW_BOX_SECONDS = 60.0


class Model:
    def __init__(self) -> None:
        self.weights = Retained(0)

    @functools.cache  # noqa: B019 - the leak under test
    def forward(self, x: int) -> int:
        return x * 2


@pytest.fixture(autouse=True)
def _nothing_retained_after():
    yield
    HELD.clear()
    Registry.entries.clear()
    Model.forward.cache_clear()


def _only(chains: list[Chain]) -> Chain:
    assert chains, "no instance sampled"
    for c in chains:
        assert c.complete, str(c)
    return chains[0]


def test_module_level_list_is_named_with_its_global():
    HELD.extend(Retained(i) for i in range(5))
    chains = referrer_chains(Retained, samples=3, timeout_seconds=SLOW_BOX_SECONDS)
    assert len(chains) == 3
    c = _only(chains)
    assert c.root == f"module {__name__} global 'HELD'"
    assert c.path[0] == f"{__name__}.Retained"
    assert c.path[1].startswith("list[")
    assert str(c).endswith(f"<- module {__name__} global 'HELD'")


def test_class_attribute_is_named_with_its_class():
    Registry.entries.append(Retained(1))
    c = _only(referrer_chains(Retained, samples=1, timeout_seconds=SLOW_BOX_SECONDS))
    assert c.root == f"class attribute {__name__}.Registry.entries"


def test_closure_variable_is_named_with_its_function():
    record = _make_recorder()
    for i in range(3):
        record(Retained(i))
    c = _only(referrer_chains(Retained, samples=2, timeout_seconds=SLOW_BOX_SECONDS))
    assert c.root == "closure variable 'seen' of _make_recorder.<locals>.record"
    assert "cell" in c.path
    del record


def test_lru_cache_on_a_method_holds_self():
    # functools.cache is lru_cache(maxsize=None)
    for i in range(3):
        Model().forward(i)  # each Model stays alive as part of a cache key
    chains = referrer_chains(Model, samples=3, timeout_seconds=SLOW_BOX_SECONDS)
    assert len(chains) == 3
    c = _only(chains)
    assert c.root == f"class attribute {__name__}.Model.forward"
    assert "functools._lru_cache_wrapper" in c.path
    # the Retained inside a cached Model: one step more, through the attribute
    c2 = _only(referrer_chains(Retained, samples=1, timeout_seconds=SLOW_BOX_SECONDS))
    assert f"{__name__}.Model.weights" in c2.path
    assert c2.root == c.root


def test_frame_local_is_a_root():
    kept = Retained(7)  # held by this test's frame only
    c = chain_of(kept)
    assert c.complete
    assert c.root.startswith("local 'kept' of frame test_frame_local_is_a_root at ")


def test_explicit_objects_and_the_callers_own_list_is_not_a_holder():
    Registry.entries.append(Retained(2))
    objs = list(Registry.entries)
    c = _only(referrer_chains(objs, timeout_seconds=SLOW_BOX_SECONDS))
    assert c.root == f"class attribute {__name__}.Registry.entries"


def test_no_instances_gives_no_chains():
    assert referrer_chains(Retained) == []


def test_time_budget_is_kept_and_an_unfinished_chain_says_so():
    # a chain of 300 nested lists: deeper than max_depth
    head: list = [Retained(0)]
    for _ in range(300):
        head = [head]
    HELD.append(head)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    (c,) = referrer_chains(Retained, max_depth=20, timeout_seconds=0.5)
    assert time.perf_counter() - t0 < 1.5
    assert not c.complete and c.root == ""
    assert str(c).endswith("(no root found within the limits)")


@pytest.mark.parametrize(("opts", "option"), [
    ({"samples": 0}, "referrers.samples"),
    ({"max_depth": True}, "referrers.max_depth"),
    ({"timeout_seconds": 0}, "referrers.timeout_seconds"),
])
def test_bad_options_name_the_option(opts, option):
    with pytest.raises(memprobe.ConfigError, match=rf"^{option}: "):
        referrer_chains(Retained, **opts)



class Box:
    """A holder with one attribute."""

    def __init__(self, item: object) -> None:
        self.item = item


_WRAPS = {
    "list": (lambda x: [None, x], "list[1]"),
    "tuple": (lambda x: (x,), "tuple[0]"),
    "dict": (lambda x: {"k": x}, "dict['k']"),
    "attr": (lambda x: Box(x), f"{__name__}.Box.item"),
}


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(_WRAPS)), min_size=0, max_size=6))
def test_chain_lists_every_container_up_to_the_global(wraps):
    objs = [Retained(0)]  # the caller's own list is never named as a holder
    holder: object = objs[0]
    for w in wraps:
        holder = _WRAPS[w][0](holder)
    HELD.append(holder)  # type: ignore[arg-type]
    del holder  # a frame local would be the nearest root
    try:
        (c,) = referrer_chains(objs, max_depth=20, timeout_seconds=SLOW_BOX_SECONDS)
    finally:
        HELD.clear()
    expected = [_WRAPS[w][1] for w in wraps]  # from the object up
    assert c.complete, str(c)
    assert list(c.path) == [f"{__name__}.Retained", *expected, "list[0]"]
    assert c.root == f"module {__name__} global 'HELD'"


def test_a_type_named_as_the_objects_probe_names_it():
    from memprobe.probes.objects import type_name

    HELD.append(Retained(3))
    (c,) = referrer_chains(type_name(Retained), samples=1)
    assert c.root == f"module {__name__} global 'HELD'"
    assert referrer_chains("no.such.Type") == []
