"""Fuzzing with hypothesis: flatten, option parsing, the JSONL reader.

- flatten: any nested dicts/lists of any keys and values give either clean
  keys with finite numbers, or a MemprobeError naming the key; never another
  exception type (and the same answer the second time, from the cached plan).
- options: parse_probes and Prober(...) with any values give a ConfigError or
  a Prober; never a TypeError, AttributeError, OverflowError...
- JSONL: read_samples on any bytes only warns; every valid line round-trips.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memprobe
from memprobe import MemprobeError, SiteKeyCap, SiteMap, flatten, parse_probes
from memprobe._flatten import INT_MAX, INT_MIN
from memprobe.report._jsonl import read_samples

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# -- flatten -----------------------------------------------------------------------

keys = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "/", "//", " ", "a b", "a_b", "a/b", "a//b", "other", "é", "\x00"]),
    st.integers(-5, 5),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.tuples(st.integers(0, 2)),
    st.binary(max_size=3),
)
leaves = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=5),
    st.binary(max_size=3),
    st.sampled_from([2**64, INT_MAX, INT_MIN, INT_MIN - 1, 10**400]),
)
trees = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.dictionaries(keys, children, max_size=4),
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.text(max_size=6), children, max_size=4).map(SiteMap),
    ),
    max_leaves=30,
)
probe_results = st.dictionaries(st.text(min_size=1, max_size=8), trees, min_size=1, max_size=3)

_CLEAN_KEY = re.compile(r"[A-Za-z0-9_.\-/:]+")


def _outcome(data: Any, cap: int) -> tuple[str, Any]:
    try:
        return "ok", flatten(data, site_key_cap=SiteKeyCap(cap), max_keys=200)
    except MemprobeError as exc:
        return "error", exc


@FUZZ
@given(probe_results, st.integers(0, 3))
def test_flatten_is_clean_or_names_the_key(data: dict[str, Any], cap: int) -> None:
    kind, result = _outcome(data, cap)
    if kind == "ok":
        for key, value in result.items():
            assert _CLEAN_KEY.fullmatch(key), key
            assert key.startswith("memprobe/") and "//" not in key and not key.endswith("/")
            assert all(memprobe.sanitize_key(part) == part for part in key.split("/"))
            assert type(value) in (int, float)
            assert math.isfinite(value)
            assert type(value) is float or INT_MIN <= value <= INT_MAX
    else:
        culprit = getattr(result, "key", None)
        assert isinstance(culprit, str) and culprit, result
        assert str(result)  # the message can be built (no huge-int repr, no recursion)
    # The second call may take the cached plan: it must agree.
    kind2, result2 = _outcome(data, cap)
    assert kind2 == kind
    if kind == "ok":
        assert result2 == result
    else:
        assert type(result2) is type(result)


@FUZZ
@given(st.dictionaries(st.text(min_size=1, max_size=6),
                       st.dictionaries(st.text(max_size=6),
                                       st.integers(INT_MIN, INT_MAX) | st.floats(
                                           allow_nan=False, allow_infinity=False),
                                       max_size=5),
                       min_size=1, max_size=3))
def test_flatten_keeps_every_finite_value(data: dict[str, dict[str, Any]]) -> None:
    try:
        out = flatten(data)
    except memprobe.KeyCollisionError as exc:  # e.g. "a b" and "a_b"
        a, b = exc.sources
        assert a != b
        return
    assert sorted(out.values()) == sorted(v for inner in data.values() for v in inner.values())


# -- option parsing --------------------------------------------------------------------

anything = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(10**100), 10**100), st.just(10**400),
        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
        st.binary(max_size=4), st.just(object()), st.just(print), st.just(Path("x")),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.tuples(children),
        st.dictionaries(st.text(max_size=8) | st.integers(0, 3), children, max_size=3),
        st.frozensets(st.integers(0, 3) | st.text(max_size=3), max_size=3),
    ),
    max_leaves=10,
)
PROBER_OPTIONS = ["every", "interval_seconds", "budget", "history", "max_failures", "prefix",
                  "max_site_keys", "time_limit_seconds", "on_leak", "leak_check_every",
                  "leak_options", "tags"]
PROBE_OPTIONS = {
    "process": ["full", "fds", "pid"],
    "gc": ["collect"],
    "objects": ["top", "collect"],
    "tracemalloc": ["top", "nframe", "group_by", "exclude", "window_steps", "period_steps",
                    "max_tracing_fraction"],
}
GUARD = ["every", "interval_seconds", "time_limit_seconds", "isolate", "max_keys"]
probe_options = st.sampled_from(sorted(PROBE_OPTIONS)).flatmap(
    lambda name: st.tuples(
        st.just(name),
        st.dictionaries(st.sampled_from(PROBE_OPTIONS[name] + GUARD), anything, max_size=3),
    )
)


@FUZZ
@given(anything | st.lists(st.sampled_from(["process", "gc", "proces", "objects"]), max_size=4))
def test_parse_probes_gives_a_dict_or_a_config_error(value: Any) -> None:
    try:
        parsed = parse_probes(value)
    except memprobe.ConfigError as exc:
        assert exc.option.startswith("probes")
        return
    assert all(isinstance(k, str) and isinstance(v, dict) for k, v in parsed.items())


@FUZZ
@given(st.dictionaries(st.sampled_from(PROBER_OPTIONS), anything, max_size=3),
       st.lists(probe_options, max_size=2))
def test_prober_options_give_a_prober_or_a_config_error(
    options: dict[str, Any], probes: list[tuple[str, dict[str, Any]]]
) -> None:
    spec = dict(probes) or None
    try:
        prober = memprobe.Prober(spec, sink=os.devnull, load_entrypoints=False, **options)
    except memprobe.ConfigError as exc:
        assert exc.option and exc.message
        assert str(exc).startswith(exc.option)
        return
    assert prober.probe_names == list(spec or memprobe.DEFAULT_PROBES)


@FUZZ
@given(st.sampled_from(PROBER_OPTIONS + [f"{p}.{o}" for p in PROBE_OPTIONS
                                         for o in PROBE_OPTIONS[p] + GUARD]),
       anything)
def test_each_option_alone_gives_a_prober_or_a_config_error(option: str, value: Any) -> None:
    if "." in option:
        probe, name = option.split(".")
        kwargs: dict[str, Any] = {"probes": {probe: {name: value}}}
    else:
        kwargs = {option: value}
    try:
        memprobe.Prober(sink=os.devnull, load_entrypoints=False, **kwargs)
    except memprobe.ConfigError as exc:
        assert exc.option and exc.message


# -- the JSONL reader --------------------------------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False)
samples = st.builds(
    memprobe.Sample,
    time_seconds=finite,
    step=st.none() | st.integers(-(2**63), 2**63),
    pid=st.integers(0, 2**31),
    values=st.dictionaries(st.text(max_size=10), st.integers(INT_MIN, INT_MAX) | finite,
                           max_size=5),
)
# Lines that are never a valid record: they do not even start a JSON object.
garbage = st.text(max_size=40).filter(lambda s: "\n" not in s).map(lambda s: "#" + s)


def _read(path: str) -> tuple[list[memprobe.Sample], list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = read_samples(path)
    return got, caught


def _read_or_refuse(path: str) -> tuple[list[memprobe.Sample] | None, list[Any]]:
    """The samples and warnings, or None when the file is refused as not memprobe JSONL."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got: list[memprobe.Sample] | None = read_samples(path)
        except memprobe.JsonlReadError as exc:
            assert "not a memprobe JSONL file" in str(exc)
            got = None
    return got, caught


@FUZZ
@given(st.binary(max_size=400))
def test_reader_only_warns_on_any_bytes(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "fuzz.jsonl")
        with open(path, "wb") as f:
            f.write(data)
        got, caught = _read_or_refuse(path)
    assert got is None or all(isinstance(s, memprobe.Sample) for s in got)
    for w in caught:
        assert issubclass(w.category, memprobe.MemprobeWarning)
        assert str(w.message).startswith(f"{path}:")


# Lines that are never a valid record, built to hurt: arbitrary bytes (NUL and control
# characters included), nesting far past the recursion limit, numbers past a double.
hostile = st.one_of(
    st.binary(max_size=60).filter(lambda b: b"\n" not in b).map(lambda b: b"#" + b),
    st.integers(2_000, 50_000).map(lambda k: b'{"time": 1, "pid": 1, "values": {}, "t": '
                                   + b"[" * k + b"]" * k + b"}"),
    st.integers(2_000, 50_000).map(lambda k: b"{" * k),
    st.sampled_from([b'{"time": 1e400, "pid": 1, "values": {}}',
                     b'{"time": 1, "pid": 1, "values": {"k": 1e999}}',
                     b'{"time": 1, "pid": 1, "values": {"k": -1e400}}',
                     b'{"time": 1, "pid": 1, "values": {"k": ' + b"9" * 5000 + b"}}",
                     b'{"time": 1, "pid": 1, "values": {"k": NaN}}',
                     b'{"time": 1, "pid": 1e30, "values": {}}',
                     b'\x00\x00{"time": 1, "pid": 1, "values": {}}',
                     b'{"time": "\x1b[2J", "pid": 1, "values": {}}',
                     b"\x1f\x8b\x08\x00garbage",
                     b"\xff\xfe\x00"]),
)


@FUZZ
@given(st.lists(st.tuples(samples, st.lists(hostile, max_size=3)), max_size=6),
       st.lists(hostile, max_size=6))
def test_hostile_lines_lose_only_themselves(items: list[tuple[memprobe.Sample, list[bytes]]],
                                            head: list[bytes]) -> None:
    """No exception escapes, every good line is kept; a file that starts with
    BAD_START_LINES bad lines is refused as a whole, with one error."""
    from memprobe.report._jsonl import BAD_START_LINES, MAX_WARNINGS

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "run.jsonl")
        sink = memprobe.JsonlSink(path, tags={"role": "fuzz"})
        expected = []
        with open(path, "wb") as f:
            f.write(b"".join(h + b"\n" for h in head))
        for sample, junk in items:
            sink.write(sample)
            expected.append(sample)
            sink.close()
            with open(path, "ab") as f:
                f.write(b"".join(j + b"\n" for j in junk))
        sink.close()
        got, caught = _read_or_refuse(path)
    first_bad = head if expected else head + [j for _, junk in items for j in junk]
    if len(first_bad) >= BAD_START_LINES or (head and head[0].startswith(b"\x1f\x8b")):
        assert got is None
        return
    assert got is not None

    def fields(s: memprobe.Sample) -> tuple[Any, ...]:
        return (s.time_seconds, s.step, s.pid, dict(s.values))

    assert [fields(s) for s in got] == [fields(s) for s in expected]
    n_bad = len(head) + sum(len(j) for _, j in items)
    # one warning per bad line, up to MAX_WARNINGS; then one that counts the rest
    assert len(caught) == (n_bad if n_bad <= MAX_WARNINGS else MAX_WARNINGS + 1)


@FUZZ
@given(st.lists(st.tuples(samples, st.lists(garbage, max_size=2)), max_size=8),
       st.booleans())
def test_every_valid_line_round_trips(items: list[tuple[memprobe.Sample, list[str]]],
                                      truncate: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "run.jsonl")
        Path(path).touch()
        sink = memprobe.JsonlSink(path, tags={"role": "fuzz"})
        expected = []
        for sample, junk in items:
            sink.write(sample)
            expected.append(sample)
            if junk:
                sink.close()
                with open(path, "a", encoding="utf-8", errors="surrogatepass") as f:
                    f.write("".join(j + "\n" for j in junk))
        sink.close()
        if truncate and expected:
            with open(path, "a", encoding="utf-8") as f:
                f.write('{"time": 1.0, "step": 3, "pid": 1, "values": {"memprobe/pro')
        got, caught = _read(path)
    def fields(s: memprobe.Sample) -> tuple[Any, ...]:
        return (s.time_seconds, s.step, s.pid, dict(s.values))

    assert [fields(s) for s in got] == [fields(s) for s in expected]
    from memprobe.report._jsonl import MAX_WARNINGS

    n_bad = sum(len(j) for _, j in items) + (truncate and bool(expected))
    assert len(caught) == (n_bad if n_bad <= MAX_WARNINGS else MAX_WARNINGS + 1)
    for sample in got:
        json.dumps(sample.values)  # what was read can be written again
