"""``memprobe report`` end to end on files of arbitrary bytes, lines, numbers and names
(issue 27): no traceback, only the exit codes docs/cli.md documents (0, 2), every good
line reported, and the process's resident size under a stated bound: at most 256 MiB over
what it was at the first example (the inputs are at most a few KiB; the reader's own caps
bound it for any input)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import psutil
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memprobe.cli import main

RSS_BOUND_BYTES = 256 * 2**20
_BASE_RSS: list[int] = []  # the resident size at the first example

names = st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
                min_size=1, max_size=40).filter(lambda s: s not in (".", "..")
                                                 and len(os.fsencode(s)) < 200)
numbers = st.one_of(st.integers(-(2**63), 2**63 - 1),
                    st.floats(allow_nan=False, allow_infinity=False))
good = st.fixed_dictionaries({
    "time": st.floats(0, 1e10),
    "step": st.none() | st.integers(-(2**63), 2**63 - 1),
    "pid": st.integers(1, 5),
    "values": st.dictionaries(st.text(max_size=20), numbers, max_size=6),
})
# bad lines: arbitrary bytes (no newline) that do not start a JSON object, or JSON objects
# that are not samples
garbage = st.one_of(
    st.binary(max_size=60).map(lambda b: b"#" + b.replace(b"\n", b"")),
    st.builds(lambda v: json.dumps({"time": 1, "pid": 1, "values": v}).encode(),
              st.one_of(st.text(max_size=5), st.lists(st.integers(), max_size=3))),
    st.just(b'{"time": 1, "step": 1' + b"0" * 400 + b', "pid": 1, "values": {}}'),
    st.just(b'{"time": 1e400, "pid": 1, "values": {}}'),
)
a_file = st.tuples(good, st.lists(st.one_of(good, garbage), max_size=25))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(names, a_file), min_size=1, max_size=3,
                unique_by=lambda f: f[0]))
def test_report_on_any_files(files: list[tuple[str, tuple[dict, list]]]) -> None:
    if not _BASE_RSS:
        _BASE_RSS.append(psutil.Process().memory_info().rss)
    expected: Counter[int] = Counter()
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for name, (first, rest) in files:
            lines = []
            for item in (first, *rest):
                if isinstance(item, dict):
                    expected[item["pid"]] += 1
                    lines.append(json.dumps(item).encode())
                else:
                    lines.append(item)
            path = os.path.join(d, name)
            Path(path).write_bytes(b"\n".join(lines) + b"\n")
            paths.append(path)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["report", *paths])
    assert "Traceback" not in err.getvalue()
    assert code == 0, err.getvalue()  # every file starts with a good line: never refused
    reported = {int(m[1]): int(m[2]) for m in
                re.finditer(r"^== pid (\d+)(?: \([^\n]*?\))?: (\d+) samples over",
                            out.getvalue(), re.M)}
    assert reported == dict(expected)
    assert psutil.Process().memory_info().rss < _BASE_RSS[0] + RSS_BOUND_BYTES


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=1, max_size=2000), st.binary(max_size=200))
def test_report_command_on_arbitrary_bytes(data: bytes, name: bytes) -> None:
    """The installed command, on a file of any bytes under any name: 0 or 2, one-line
    errors, no traceback."""
    name = name.replace(b"/", b"_").replace(b"\x00", b"_")[:150] or b"x"
    if name in (b".", b".."):
        name = b"x"
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(os.fsencode(d), name), "wb") as f:
            f.write(data)
        res = subprocess.run([str(Path(sys.executable).with_name("memprobe")), "report",
                              name], cwd=d, capture_output=True, timeout=60)
    assert res.returncode in (0, 2), res.stderr
    assert b"Traceback" not in res.stderr
    if res.returncode == 2:
        assert res.stderr.splitlines()[-1].startswith(b"memprobe: error: ")
