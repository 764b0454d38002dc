"""JsonlSink: the line format (strict JSON of the record, by orjson or by json.dumps),
the round trip through memprobe.report._jsonl, {pid} and fork, and failures that turn the
sink off."""

from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memprobe
from memprobe import Sample
from memprobe._jsonl_fields import RECORD_FIELDS
from memprobe.engine._sinks import JsonlSink
from memprobe.report._jsonl import iter_records, read_samples


def _no_constants(name: str) -> float:
    raise AssertionError(f"the line is not strict JSON: it has {name}")


def parse(line: bytes) -> dict:
    """One line, checked: ends with its only newline, strict JSON (no NaN), UTF-8."""
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    return json.loads(line.decode("utf-8"), parse_constant=_no_constants)


def expected(sample: Sample, tags: dict) -> dict:
    """What a line should read back as: the record, JSON's way (str keys, nan/inf as null)."""

    def finite(v: object) -> object:
        return None if isinstance(v, float) and not math.isfinite(v) else v

    record = {"time": finite(sample.time_seconds), "step": sample.step, "pid": sample.pid}
    record.update({k: finite(v) for k, v in tags.items()})
    record["values"] = {k: finite(v) for k, v in sample.values.items()}
    return json.loads(json.dumps(record))


keys = st.one_of(
    st.text(max_size=30),  # any str: quotes, backslashes, %, control and non-ASCII characters
    st.from_regex(r"memprobe/[a-z_]{1,10}/[a-z_]{1,12}", fullmatch=True),
)
finite = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 5e-324, 1.7976931348623157e308, 1e16, 0.1]),
)
tag_values = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10), finite)
tag_names = st.text(min_size=1, max_size=10).filter(lambda k: k not in RECORD_FIELDS)
samples = st.builds(
    Sample,
    time_seconds=st.floats(0, 4e9),
    step=st.one_of(st.none(), st.integers(-(2**70), 2**70)),
    pid=st.integers(1, 2**22),
    values=st.dictionaries(keys, finite, max_size=30),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(samples, min_size=1, max_size=4), st.dictionaries(tag_names, tag_values, max_size=3)
)
def test_lines_are_the_record_and_read_back(batch: list[Sample], tags: dict) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.jsonl")
        sink = JsonlSink(path, tags=tags)
        for s in batch:
            assert parse(sink._line(s)) == expected(s, tags)
            sink.write(s)
        sink.close()
        with open(path, "rb") as f:  # JSON may hold U+0085 or U+2028 raw: split at b"\n" only
            lines = f.read().split(b"\n")[:-1]
        assert len(lines) == len(batch)
        for line, s in zip(lines, batch):
            assert json.loads(line) == {
                "time": s.time_seconds, "step": s.step, "pid": s.pid, **tags, "values": s.values
            }
        records = list(iter_records(path))
    assert [r.sample for r in records] == batch
    for r, s in zip(records, batch):
        assert r.tags == tags
        # same types too: an int stays an int, a float a float (1e16 is not 10000000000000000)
        assert [type(v) for v in r.sample.values.values()] == [type(v) for v in s.values.values()]


odd = st.one_of(
    st.booleans(),
    st.sampled_from([math.nan, math.inf, -math.inf, 2**70, -(2**70)]),
    st.floats(min_value=1e307, max_value=1.7e308),  # finite, but several overflow a sum
    finite,
)


@given(
    st.dictionaries(st.one_of(keys, st.integers(), st.none(), st.booleans()), odd, max_size=8),
    st.one_of(st.none(), st.booleans(), st.integers()),
    st.one_of(st.floats(), st.integers(0, 2**40)),
    st.dictionaries(st.sampled_from([*RECORD_FIELDS, "role"]), st.one_of(st.integers(), odd),
                    max_size=2),
)
def test_odd_samples_still_give_one_strict_json_line(
    values: dict, step: object, t: object, tags: dict
) -> None:
    """Bools, nan/inf, ints beyond 64 bits (which orjson refuses: json.dumps writes
    them), non-str keys, an int time, a tag named like a field: one line each,
    strict JSON, reading back as the record does through json."""
    s = Sample(t, step, 7, values)  # type: ignore[arg-type]
    sink = JsonlSink(os.devnull, tags=tags)
    assert parse(sink._line(s)) == expected(s, tags)


def test_numpy_and_float_subclasses_take_the_json_path() -> None:
    np = pytest.importorskip("numpy")

    class Seconds(float):
        pass

    s = Sample(1.0, 1, 2, {"a": np.float64(2.5), "c": Seconds(0.25), "d": np.float64("nan")})
    assert parse(JsonlSink(os.devnull)._line(s))["values"] == {"a": 2.5, "c": 0.25, "d": None}


def test_without_orjson_the_lines_read_back_the_same(tmp_path) -> None:
    """A real interpreter where ``import orjson`` fails (as on PyPy): json.dumps writes
    the same records."""
    batch = [
        Sample(1796290257.8396719, None, 11, {"memprobe/process/rss_bytes": 2**40, "x": 1e-05}),
        Sample(2.5, 3, 11, {"k%s\u00e9": 0.1, "big": 2**64 - 1, "neg": -(2**63), "f": -0.0}),
        Sample(3.5, 4, 11, {"nan": math.nan, "inf": math.inf, "huge": 2**70}),
    ]
    tags = {"env_runner": 2, "role": "main"}
    script = (
        "import sys, json, pickle\n"
        "sys.modules['orjson'] = None\n"  # import orjson now raises ImportError
        "from memprobe.engine import _sinks\n"
        "assert _sinks._orjson is None\n"
        "batch, tags = pickle.loads(sys.stdin.buffer.read())\n"
        "sink = _sinks.JsonlSink('/dev/null', tags=tags)\n"
        "sys.stdout.buffer.write(b''.join(sink._line(s) for s in batch))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], input=pickle.dumps((batch, tags)),
                         capture_output=True, check=True).stdout
    lines = out.splitlines(keepends=True)
    assert len(lines) == len(batch)
    ours = JsonlSink(os.devnull, tags=tags)
    for line, s in zip(lines, batch):
        assert parse(line) == parse(ours._line(s)) == expected(s, tags)


def test_tags_are_read_at_every_write(tmp_path) -> None:
    sink = JsonlSink(tmp_path / "s.jsonl", tags={"role": "main"})
    a = Sample(1.5, 1, 2, {"k": 1, "x%s": 2.5})
    assert parse(sink._line(a)) == expected(a, sink.tags)
    sink.tags["env_runner"] = 3
    assert parse(sink._line(a))["env_runner"] == 3
    sink.tags = {"pid": "not the pid"}  # a tag named like a field replaces it, as dict.update
    assert parse(sink._line(a))["pid"] == "not the pid"


def test_each_line_is_on_disk_when_write_returns(tmp_path) -> None:
    with memprobe.Prober(sink=str(tmp_path / "run-{pid}.jsonl"), tags={"env_runner": 1}) as p:
        for i in range(3):
            p.sample(step=i)
            path = p.sink.path  # type: ignore[union-attr]
            assert len(read_samples(path)) == i + 1  # no buffering to flush
    assert path == str(tmp_path / f"run-{os.getpid()}.jsonl")
    recs = list(iter_records(path))
    assert [r.sample.step for r in recs] == [0, 1, 2]
    assert [r.sample.values for r in recs] == [s.values for s in p.history]
    assert all(r.tags == {"env_runner": 1} for r in recs)


def test_appends_to_an_existing_file_and_survives_close_and_pickle(tmp_path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"time":1.0,"step":null,"pid":1,"values":{}}\n')
    sink = JsonlSink(path)
    sink.write(Sample(2.0, 1, 1, {"a": 1}))
    sink.close()
    sink.write(Sample(3.0, 2, 1, {"a": 2}))  # reopens
    clone = pickle.loads(pickle.dumps(sink))
    sink.close()
    clone.write(Sample(4.0, 3, 1, {"a": 3}))
    clone.close()
    assert [s.time_seconds for s in read_samples(path)] == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_its_own_file(tmp_path) -> None:
    sink = JsonlSink(tmp_path / "p-{pid}.jsonl")
    sink.write(Sample(1.0, 0, os.getpid(), {"a": 1}))
    parent_path = sink.path
    pid = os.fork()
    if pid == 0:  # the child: its own file, from a sample made here or an old one
        code = 0
        try:
            sink.write(Sample(2.0, 1, os.getpid(), {"a": 2}))
            code = 0 if sink.path.endswith(f"p-{os.getpid()}.jsonl") else 3
        except BaseException:
            code = 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    sink.write(Sample(3.0, 2, os.getpid(), {"a": 3}))
    sink.close()
    assert [s.step for s in read_samples(parent_path)] == [0, 2]
    child = read_samples(tmp_path / f"p-{pid}.jsonl")
    assert [(s.step, s.pid) for s in child] == [(1, pid)]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_disk_full_warns_once_and_turns_the_sink_off() -> None:
    sink = JsonlSink("/dev/full")
    with pytest.warns(memprobe.MemprobeWarning, match=r"/dev/full.*ENOSPC|/dev/full.*No space"):
        sink.write(Sample(1.0, 0, os.getpid(), {"a": 1}))
    assert sink.failed
    sink.write(Sample(2.0, 1, os.getpid(), {"a": 2}))  # silent: warnings are errors here
    sink.close()


def test_a_path_under_a_regular_file_warns_once_and_never_fails_the_loop(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    target = str(blocker / "sub" / "s.jsonl")
    with pytest.warns(memprobe.MemprobeWarning, match="sub/s.jsonl"):
        with memprobe.Prober(sink=target) as p:
            p.sample()
            p.sample()
    assert p.sink.failed  # type: ignore[union-attr]
    assert len(p.history) == 2


def test_the_written_values_are_the_sample_values(tmp_path) -> None:
    """Real probes, real file: what the reader gets back is what sample() returned."""
    out = []
    with memprobe.Prober(sink=str(tmp_path / "s.jsonl")) as p:
        for i in range(20):
            out.append(p.sample(step=i))
    back = read_samples(tmp_path / "s.jsonl")
    assert [s.values for s in back] == out
    assert all(s.pid == os.getpid() for s in back)


# -- sinks by name, through memprobe_register_sinks -----------------------------------


def test_the_jsonl_sink_is_registered_like_a_plugins(tmp_path) -> None:
    from memprobe._plugins import collect_sinks

    registry = collect_sinks(memprobe.get_plugin_manager(load_entrypoints=False))
    assert registry["jsonl"].plugin == "jsonl"
    path = tmp_path / "named.jsonl"
    with memprobe.Prober(["process"], sinks={"jsonl": {"path": path, "tags": {"run": 7}}},
                         load_entrypoints=False) as p:
        p.sample(step=0)
        p.sample(step=1)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1]
    assert all(line["run"] == 7 for line in lines)


def test_an_unknown_sink_name_suggests_the_closest() -> None:
    with pytest.raises(memprobe.ConfigError, match=r"unknown sink 'jsnl'; did you mean 'jsonl'"):
        memprobe.Prober(sinks={"jsnl": {"path": "x.jsonl"}}, load_entrypoints=False)


def test_a_bad_sink_option_names_the_sink_and_the_option(tmp_path) -> None:
    with pytest.raises(memprobe.ConfigError, match=r"sinks\.jsonl: unknown option 'pth'"):
        memprobe.Prober(sinks={"jsonl": {"pth": "x"}}, load_entrypoints=False)
    with pytest.raises(memprobe.ConfigError, match=r"sinks\.jsonl\.tags"):
        memprobe.Prober(sinks={"jsonl": {"path": tmp_path / "a", "tags": {"time": 1}}},
                        load_entrypoints=False)
    assert not (tmp_path / "a").exists()


def test_a_third_party_sink_through_its_entry_point(tmp_path) -> None:
    """The example plugin package registers ``example_csv`` through its entry point."""
    csv_path = tmp_path / "out.csv"
    jsonl_path = tmp_path / "out.jsonl"
    key = "memprobe/process/rss_bytes"
    with memprobe.Prober(["process"], sinks={"example_csv": {"path": str(csv_path), "keys": [key]},
                                              "jsonl": {"path": jsonl_path}}) as p:
        values = [p.sample(step=i) for i in range(3)]
        assert type(p.sinks[0]).__module__ == "memprobe_example.plugin"
    rows = [line.split(",") for line in csv_path.read_text().splitlines()]
    assert [(r[1], r[2], int(r[3])) for r in rows] == [(str(i), key, v[key])
                                                        for i, v in enumerate(values)]
    assert len(jsonl_path.read_text().splitlines()) == 3


def test_sink_path_and_named_sinks_together(tmp_path) -> None:
    with memprobe.Prober(["gc"], sink=tmp_path / "a.jsonl",
                         sinks={"jsonl": {"path": tmp_path / "b.jsonl"}},
                         load_entrypoints=False) as p:
        p.sample()
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text() != ""


def test_a_fifo_or_a_symlink_at_the_path_is_refused_without_blocking(tmp_path) -> None:
    fifo, target, link = tmp_path / "fifo", tmp_path / "target", tmp_path / "link.jsonl"
    os.mkfifo(fifo)
    target.write_text("kept\n")
    link.symlink_to(target)
    for path in (fifo, link):
        with pytest.warns(memprobe.MemprobeWarning, match=str(path.name)):
            with memprobe.Prober(sink=str(path)) as p:
                p.sample()  # returns: a FIFO nobody reads never blocks the loop
        assert p.sink.failed  # type: ignore[union-attr]
    assert target.read_text() == "kept\n"  # never written through the link
