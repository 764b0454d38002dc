"""Regression tests for issue 24 (the kind in windowed mode): a library's blocks in flight
(RLlib's episodes not yet returned) survive every short tracing window of a healthy
process too; they must not make a native leak "python" at the library's sites, while a
library that keeps what it allocates (no frame of the user's on its stack) stays python.

Real programs in fresh interpreters: ``json.loads`` run by a thread pool's worker (a
stack of the standard library's alone), its documents kept for a few steps and then
given back (in flight) or kept for good (a library's leak); a C ``malloc`` through
ctypes never freed (native)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_culprit_windows import NATIVE_HELPER

PROGRAM = """\
import collections, concurrent.futures, json
import nativehelper
DOC = json.dumps([{{"item": i, "name": f"item {{i}}"}} for i in range(150)])
POOL = concurrent.futures.ThreadPoolExecutor(1)
IN_FLIGHT = collections.deque(maxlen=8)   # given back 8 steps later
KEPT = []
def step():
    docs = [f.result() for f in [POOL.submit(json.loads, DOC) for _ in range({docs})]]
    {keep}
    {native}
"""

RUNNER = """
import json, sys
import memprobe
mod = __import__(sys.argv[1])
probes = {"process": {}, "gc": {"blocks": True},
          "tracemalloc": {"window_steps": 1, "period_steps": 5, "top": 10}}
with memprobe.Prober(probes, load_entrypoints=False,
                     sink=memprobe.JsonlSink(sys.argv[2])) as prober:
    for i in range(200):
        mod.step()
        prober.sample(step=i)
    v = prober.report().get("process/rss_bytes")
print(json.dumps({"status": v.status, "kind": v.kind, "culprits": list(v.culprits),
                  "note": v.note}))
"""


def _run(tmp_path: Path, name: str, **parts: str) -> tuple[dict, Path]:
    (tmp_path / "nativehelper.py").write_text(NATIVE_HELPER)
    (tmp_path / f"{name}.py").write_text(PROGRAM.format(**parts))
    (tmp_path / "runner.py").write_text(RUNNER)
    path = tmp_path / f"{name}.jsonl"
    out = subprocess.run([sys.executable, "runner.py", name, str(path)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), path


def _report(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "memprobe", "report", "--json", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def test_a_librarys_blocks_in_flight_do_not_make_a_native_leak_python(tmp_path: Path) -> None:
    """32 KiB malloc'ed per step, never freed; json's documents (some 40 KiB a step, more
    than the growth) survive each window and are given back 8 steps later."""
    rss, path = _run(tmp_path, "inflight_native", docs="3",
                     keep="IN_FLIGHT.append(docs)",
                     native="KEPT.append(nativehelper.make_buffer(32768))")
    assert rss["status"] == "leak", rss
    assert rss["kind"] == "native", rss
    library = ("json/", "concurrent/", "threading")
    assert not any(c.startswith(library) for c in rss["culprits"]), rss
    assert "native_traces" in rss["note"], rss  # the way to the C stack
    text = json.dumps(_report(path))
    assert "native" in text and "json/decoder.py" not in text, text


def test_a_python_leak_inside_a_library_stays_python(tmp_path: Path) -> None:
    """json's documents kept for good, made on a stack with no frame of the user's: the
    library's line is named, and the note says the user's frame was not reached."""
    rss, _path = _run(tmp_path, "library_keeps", docs="2", keep="KEPT.append(docs)",
                      native="pass")
    assert rss["status"] == "leak" and rss["kind"] == "python", rss
    assert rss["culprits"] and rss["culprits"][0].startswith("json/"), rss


TORCH_PROGRAM = """\
import torch
torch.set_num_threads(1)
KEPT = []
def step():
    KEPT.append(torch.ones(65536))  # 256 KiB of storage, outside tracemalloc's view
"""


def test_kept_tensors_in_windows_are_native_at_the_users_line(tmp_path: Path) -> None:
    """The tensors' storage is native memory; the tensor objects survive every window at
    the user's line. With no count of live objects that grows (here: not counted; in an
    RLlib EnvRunner, a few blocks a step among 1.7 M that come and go), the user's line
    that makes the surviving objects still names the native growth (before: native with
    no culprit, and the live key ``native``)."""
    import pytest

    pytest.importorskip("torch")
    (tmp_path / "keeptensors.py").write_text(TORCH_PROGRAM)
    (tmp_path / "runner.py").write_text(RUNNER.replace('"blocks": True', '"blocks": False'))
    path = tmp_path / "keeptensors.jsonl"
    out = subprocess.run([sys.executable, "runner.py", "keeptensors", str(path)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rss = json.loads(out.stdout.strip().splitlines()[-1])
    assert rss["status"] == "leak" and rss["kind"] == "native", rss
    assert rss["culprits"] and rss["culprits"][0] == "keeptensors.py:5", rss
    assert "held by objects the user's lines make" in rss["note"], rss
    assert "tracemalloc windows" in rss["note"], rss  # what it rests on


# A helper module hands out C buffers (ctypes ``malloc``, never freed) and the user's
# code keeps their addresses: 20 a step, 2 KiB each. Beside it, a library's results in
# flight, made on a thread pool's worker (no frame of the user's on their stack) at a
# dozen sites of 1-4 KiB each, given back 4 steps later: RLlib's episodes not yet
# returned, as in an EnvRunner (docs/rllib.md, native_lib_leak).
HOLDER_PROGRAM = """\
import collections, concurrent.futures, copy, email, fnmatch, heapq, json, pprint, random
import shlex, string, textwrap, urllib.parse
import nativehelper
MSG = "From: a@b.c\\nTo: d@e.f\\nSubject: s\\n\\n" + "body line\\n" * 80
DOC = json.dumps([{"k": i, "v": f"x{i}"} for i in range(24)])
TREE = {"a": [{"b": list(range(6)), "c": {"d": "e"}} for _ in range(24)]}
ARGS = " ".join(f"--opt{i}='v {i}'" for i in range(30))
TEXT = " ".join(f"word{i}" for i in range(300))
QUERY = "&".join(f"key{i}=value{i}" for i in range(30))
POOL = concurrent.futures.ThreadPoolExecutor(1)
CALLS = ((email.message_from_string, MSG), (json.loads, DOC), (copy.deepcopy, TREE),
         (shlex.split, ARGS), (textwrap.wrap, TEXT), (urllib.parse.parse_qsl, QUERY),
         (pprint.pformat, TREE), (collections.Counter, TEXT.split()[:100]),
         (random.Random(0).sample, range(1000), 100), (heapq.nlargest, 60, range(1000)),
         (fnmatch.filter, TEXT.split(), "word1*"), (string.capwords, TEXT))
IN_FLIGHT = collections.deque(maxlen=4)
KEPT = []
def step():
    IN_FLIGHT.append([f.result() for f in [POOL.submit(*call) for call in CALLS]])
    for _ in range(20):
        KEPT.append(nativehelper.make_buffer(2048))
"""
#: The helper's line whose int (the buffer's address) the user keeps.
HOLDER_LINE = "nativehelper.py:7"


def _windows_listing(path: Path, site: str) -> list[bool]:
    """For each closed window in the JSONL: whether it lists ``site`` among its survivors."""
    out = []
    for line in path.read_text().splitlines():
        values = json.loads(line).get("values", {})
        if "memprobe/tracemalloc/survivors_bytes" in values:
            out.append(f"memprobe/tracemalloc/survivors/{site}/size_bytes" in values)
    return out


def _rss_of(report: dict) -> dict:
    proc = report["processes"][0]
    return next(m for m in proc["metrics"] if m["metric"] == "process/rss_bytes")


def _run_holder(tmp_path: Path, runner: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Run the holder program (the helper keeping C buffers' addresses) under ``runner``
    in a fresh interpreter; its JSONL's path and the finished process."""
    (tmp_path / "nativehelper.py").write_text(NATIVE_HELPER)
    (tmp_path / "holder.py").write_text(HOLDER_PROGRAM)
    (tmp_path / "runner.py").write_text(runner)
    path = tmp_path / "holder.jsonl"
    out = subprocess.run([sys.executable, "runner.py", "holder", str(path)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return path, out


def test_the_helpers_line_that_keeps_c_buffers_is_named_beside_blocks_in_flight(
        tmp_path: Path) -> None:
    """The addresses are 640 B a window against the library's 27 KiB of blocks in flight
    at a dozen larger sites: the windows list the user's own surviving sites first, so
    the line is in every window, and the prober and ``memprobe report`` both name it as
    what holds the native growth (before: cut from the top 10 in every window, and both
    said "native memory" with no line)."""
    path, out = _run_holder(tmp_path, RUNNER)
    live = json.loads(out.stdout.strip().splitlines()[-1])
    listed = _windows_listing(path, HOLDER_LINE)
    assert len(listed) >= 5 and all(listed), listed
    assert live["status"] == "leak" and live["kind"] == "native", live
    assert live["culprits"][:1] == [HOLDER_LINE], live
    rss = _rss_of(_report(path))
    assert rss["kind"] == "native" and rss["culprits"][:1] == [HOLDER_LINE], rss
    assert "tracemalloc windows" in rss["note"], rss  # what it rests on


# Windows that name no site (top=0), and the alarm's capture (nframe 16, by site).
CAPTURE_RUNNER = """
import sys, time
import memprobe
mod = __import__(sys.argv[1])
fired = []
probes = {"process": {}, "gc": {"blocks": True},
          "tracemalloc": {"window_steps": 1, "period_steps": 5, "top": 0}}
with memprobe.Prober(probes, load_entrypoints=False, on_leak=fired.append,
                     capture_on_leak={"duration_seconds": 1.0},
                     sink=memprobe.JsonlSink(sys.argv[2])) as prober:
    for i in range(400):
        mod.step()
        prober.sample(step=i)
        time.sleep(0.005)
assert fired, "the alarm did not fire"
"""


def test_the_alarms_capture_names_the_holder_the_windows_did_not(tmp_path: Path) -> None:
    """The windows name no site; the alarm's capture saw the helper's line keep its
    addresses. The native verdict's holder comes from every tracemalloc view, the capture
    included, in ``memprobe report`` (before: the windows' sites only, "native memory"
    with no line, though the capture's line was in the same JSONL)."""
    path, _ = _run_holder(tmp_path, CAPTURE_RUNNER)
    assert "memprobe/capture/duration_seconds" in path.read_text(), "no capture line"
    rss = _rss_of(_report(path))
    # The user's lines that keep the addresses: the helper's, and the list's append when
    # the list grew its array during the capture.
    assert rss["kind"] == "native" and HOLDER_LINE in rss["culprits"], rss
    assert rss["culprits"][0] in (HOLDER_LINE, "holder.py:21"), rss
    assert "the alarm's capture" in rss["note"], rss
