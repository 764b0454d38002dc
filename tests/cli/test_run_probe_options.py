"""``memprobe run --probe-option PROBE.OPTION=VALUE``: a probe's options on the command line,
checked before any file is touched, each refusal naming the option at fault."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memprobe.cli._probe_options import parse_probe_options, parse_value

PROGRAM = "open('ran', 'w').close()\nKEPT = [bytearray(1000) for _ in range(10)]\n"


def memprobe_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memprobe", "run", *args, "p.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("given_options", "error"), [
    (["memray.native_trace=true"],
     "--probe-option memray.native_trace: the memray probe has no option 'native_trace'; "
     "did you mean 'native_traces'?"),
    (["memray.native_traces=yes"], "--probe-option memray.native_traces: must be a bool, "
     "got 'yes'"),
    (["memry.native_traces=true"], "--probe-option memry.native_traces: unknown probe "
     "'memry'; did you mean 'memray'?"),
    (["tracemalloc.nframe=16"], "--probe-option tracemalloc.nframe: the tracemalloc probe "
     "is not in --probes (process,memray); add it there"),
    (["memray.every=0"], "--probe-option memray.every: must be an int >= 1, got 0"),
    (["memray.top=3", "memray.top=4"], "--probe-option memray.top: is given twice"),
    (["memray"], "--probe-option: must be PROBE.OPTION=VALUE (memray.native_traces=true), "
     "got 'memray'"),
])
def test_a_bad_probe_option_is_refused_before_any_file_is_touched(
        tmp_path: Path, given_options: list[str], error: str) -> None:
    (tmp_path / "p.py").write_text(PROGRAM)
    (tmp_path / "o.jsonl").write_text("the previous run\n")
    args = [a for o in given_options for a in ("--probe-option", o)]
    res = memprobe_run(tmp_path, "--probes", "process,memray", *args, "-o", "o.jsonl")
    assert res.returncode == 2, res
    assert res.stderr.startswith(f"memprobe: error: {error}"), res.stderr
    assert len(res.stderr.splitlines()) == 1, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.jsonl", "p.py"]  # nor ran
    assert (tmp_path / "o.jsonl").read_text() == "the previous run\n"


def test_probe_options_reach_the_probe(tmp_path: Path) -> None:
    """tracemalloc's windows, set from the command line: the samples say a window opened
    and closed, and list the sites that survived it; nframe reaches the probe too (one
    frame with group_by='user' is refused by the probe itself)."""
    (tmp_path / "p.py").write_text(PROGRAM + "import time\n"
                                   "for _ in range(40):\n"
                                   "    KEPT.append(bytearray(5000))\n"
                                   "    time.sleep(0.01)\n")
    res = memprobe_run(tmp_path, "--probes", "process,tracemalloc", "--interval", "0.01",
                       "--probe-option", "tracemalloc.window_steps=2",
                       "--probe-option", "tracemalloc.period_steps=5", "-o", "o.jsonl")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line)["values"]
            for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    active = [r["memprobe/tracemalloc/window_active"] for r in rows
              if "memprobe/tracemalloc/window_active" in r]
    assert 0 in active and 1 in active, active
    assert any(k.startswith("memprobe/tracemalloc/survivors/") for r in rows for k in r)
    assert not any(k.startswith("memprobe/tracemalloc/top/") for r in rows for k in r)
    res = memprobe_run(tmp_path, "--probes", "process,tracemalloc",
                       "--probe-option", "tracemalloc.nframe=1", "-o", "o2.jsonl")
    assert res.returncode == 2
    assert res.stderr.startswith("memprobe: error: --probe-option tracemalloc.nframe: "
                                 "group_by='user' names the user's line"), res.stderr


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8)


@given(JSON)
def test_a_value_written_as_json_is_read_as_that_value(value: object) -> None:
    assert parse_value(json.dumps(value)) == value


@given(st.text())
def test_a_value_that_is_no_json_is_the_string_itself(text: str) -> None:
    try:
        json.loads({"True": "true", "False": "false", "None": "null"}.get(text.strip(), text))
    except ValueError:
        assert parse_value(text) == text


def test_python_words_are_read_as_their_json_words() -> None:
    assert [parse_value(w) for w in ("True", "False", "None", "lineno")] == [
        True, False, None, "lineno"]


def test_options_are_grouped_by_probe_and_the_value_after_the_first_equals_is_kept() -> None:
    def factory(*, a: int = 0, b: str = "") -> None: ...

    got = parse_probe_options(["p.a=3", "p.b=x=y", "p.every=2"], ["p"], {"p": factory})
    assert got == {"p": {"a": 3, "b": "x=y", "every": 2}}
