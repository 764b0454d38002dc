"""The Prober's deep capture: its leak alarm, on cheap probes, names the leaking line."""

from __future__ import annotations

import ctypes
import inspect
import os
import shutil
import subprocess
import tracemalloc
import warnings

import pytest

import memprobe
from memprobe.cli import main
from memprobe.keys import make_key
from memprobe.report._jsonl import read_samples

LEAKED: list[bytearray] = []

#: These tests judge this process's rss: its allocations must fault in new pages.
pytestmark = pytest.mark.usefixtures("fresh_heap")


@pytest.fixture(autouse=True)
def _clear():
    yield
    LEAKED.clear()


def _line() -> int:
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def _cheap_step() -> int:
    return sum([i for i in range(50)])


def _run(prober: memprobe.Prober, leak_from: int, steps: int = 6000) -> tuple[int | None, int]:
    """Steps until the capture closed (None: never), and the leaking line."""
    line = 0
    for step in range(steps):
        _cheap_step()
        if step >= leak_from:
            LEAKED.append(bytearray(64 * 1024)); line = _line()  # noqa: E702
        prober.sample(step)
        # The capture may close before the alarm: the forecast time to out-of-memory
        # opens it as soon as it is under an hour, before the leak has lasted long
        # enough to alarm.
        if prober.alarm is not None and prober.alarm.culprits is not None \
                and prober.alarm.alarmed:
            return step, line
    return None, line


def test_capture_on_alarm_names_the_line_of_a_leak_that_starts_midway(tmp_path, capsys):
    """A long run on process and gc only; a leak starts at step 1500; the alarm fires,
    the Prober opens its capture by itself, and the line is named in the alarm's
    verdict, in its culprits and in the JSONL."""
    path = tmp_path / "run.jsonl"
    fired = []
    for _ in range(2000):  # the interpreter's own warm-up, before measuring
        _cheap_step()
    prober = memprobe.Prober(
        probes=["process", "gc"], sink=str(path), on_leak=fired.append,
        leak_check_every=50, load_entrypoints=False,
        leak_options={"threshold_per_step": 16384},
        capture_on_leak={"duration_seconds": 0.3, "holders_timeout_seconds": 60})
    with prober:
        done, line = _run(prober, leak_from=1500)
    assert fired, "the alarm never fired"
    assert all(v.key.endswith("rss_bytes") or v.key.endswith("uss_bytes")
               or v.key.endswith("pss_bytes") or v.key.endswith("vms_bytes") for v in fired)
    assert done is not None, "the capture never closed"
    site = f"tests/test_alarm_capture.py:{line}"
    culprits = prober.alarm.culprits
    assert culprits.python_sites[0][0] == site, culprits.python_sites
    assert culprits.python_sites[0][1] >= 64 * 1024
    assert culprits.duration_seconds >= 0.3
    # The verdict that opened the capture names the line first.
    latest = prober.alarm.latest.verdicts[fired[0].key]
    assert latest.culprits[0] == site, latest.culprits
    assert "culprits captured" in latest.note
    # The kind from what the capture saw kept, and the note says so.
    assert latest.kind == "python" and "from the capture" in latest.note, latest.note
    assert not tracemalloc.is_tracing()  # the capture released what it started
    # The JSONL: one more line, keys under memprobe/capture/, the site named.
    samples = read_samples(path)
    captured = [s for s in samples if any(k.startswith("memprobe/capture/") for k in s.values)]
    assert len(captured) == 1
    values = captured[0].values
    assert values[make_key("memprobe", "capture", f"tracemalloc/survivors/{site}/size_bytes")] \
        >= 64 * 1024
    assert values["memprobe/capture/duration_seconds"] >= 0.3
    assert values["memprobe/capture/start_seconds"] >= 0
    assert len(values) <= 3 * 10 * 2 + 3  # bounded: top sites, types, and three timings
    # memprobe report shows what the capture named, and no longer hints to rerun for it.
    capsys.readouterr()
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "captured when the leak alarm fired:" in out
    assert f"    {site}  python: " in out, out
    assert "to name the line" not in out
    # One capture per process: the run goes on, no second one.
    with prober:
        for step in range(done + 1, done + 400):
            LEAKED.append(bytearray(1024))
            prober.sample(step)
    assert sum(1 for s in read_samples(path)
               if "memprobe/capture/duration_seconds" in s.values) == 1


_LEAKY_APP = """
import json, sys
import memprobe

class Session:
    def __init__(self, n):
        self.n = n
        self.payload = [n] * 8

SESSIONS = []

def main(path):
    fired = []
    prober = memprobe.Prober(probes={"process": {}, "objects": {"top": 20}}, sink=path,
                             on_leak=fired.append, leak_check_every=10, load_entrypoints=False,
                             capture_on_leak={"holders_timeout_seconds": 60})
    with prober:
        for step in range(300):
            SESSIONS.extend(Session(i) for i in range(100))
            prober.sample(step)
            if fired and prober.alarm.culprits is not None:
                break
    print(json.dumps({
        "fired": [[v.key, v.kind, list(v.culprits)] for v in fired],
        "holders": {k: list(v.holders) for k, v in prober.alarm.latest.verdicts.items()},
        "capturing": prober.alarm.capturing,
    }))
"""


def test_alarm_on_a_leaking_type_names_who_holds_it(tmp_path, capsys):
    """Instances of a class pile up in a module-level list; the Prober's objects probe
    judges the type leaking and its alarm fires. No window is opened: the holders of a
    few instances are walked at once, and the chain that names the list's global is in
    the verdict, in the JSONL and in ``memprobe report`` (text and HTML). A fresh
    interpreter: in the suite's heap a new type stays below the objects probe's top 20."""
    import json
    import sys

    (tmp_path / "leaky_app.py").write_text(_LEAKY_APP)
    path = tmp_path / "run.jsonl"
    out = subprocess.run([sys.executable, "-c", f"import leaky_app; leaky_app.main({str(path)!r})"],
                         cwd=tmp_path, capture_output=True, text=True, check=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])})
    result = json.loads(out.stdout.strip().splitlines()[-1])
    chain = "leaky_app.Session <- list[0] <- module leaky_app global 'SESSIONS'"
    assert any(kind == "objects" and "leaky_app.Session" in culprits
               for _, kind, culprits in result["fired"]), result
    assert not result["capturing"]  # no tracemalloc window: the type was already named
    held = [h for h in result["holders"].values() if h]
    assert held and all(h[0] == chain for h in held), result["holders"]
    # The JSONL: the capture line carries the chains in its holders field.
    lines = [s for s in read_samples(path) if "memprobe/capture/duration_seconds" in s.values]
    assert len(lines) == 1 and lines[0].labels is not None
    assert lines[0].labels["holders"].splitlines()[0] == chain
    # memprobe report, text and HTML.
    capsys.readouterr()
    html = tmp_path / "report.html"
    assert main(["report", str(path), "--html", str(html)]) == 0
    text = capsys.readouterr().out
    assert f"  held by (referrer chains walked when the leak alarm fired):\n    {chain}\n" in text
    assert "to name the line" not in text  # the objects probe ran: the type is named
    assert "module leaky_app global &#x27;SESSIONS&#x27;" in html.read_text()


def test_warn_mode_warns_with_the_culprits(tmp_path):
    prober = memprobe.Prober(
        probes=["process"], on_leak="warn", leak_check_every=50, load_entrypoints=False,
        leak_options={"threshold_per_step": 16384},
        capture_on_leak={"duration_seconds": 0.2, "holders": False})
    with warnings.catch_warnings(record=True) as caught, prober:
        warnings.simplefilter("always")
        done, line = _run(prober, leak_from=300, steps=4000)
    assert done is not None
    texts = [str(w.message) for w in caught if issubclass(w.category, memprobe.LeakWarning)]
    assert any(t.startswith("memprobe: leak culprits") and
               f"tests/test_alarm_capture.py:{line}" in t for t in texts), texts


def test_stop_abandons_an_open_capture():
    prober = memprobe.Prober(
        probes=["process"], on_leak=lambda v: None, leak_check_every=50,
        load_entrypoints=False, leak_options={"threshold_per_step": 16384},
        capture_on_leak={"duration_seconds": 600})
    prober.start()
    for step in range(4000):
        LEAKED.append(bytearray(64 * 1024))
        prober.sample(step)
        if prober.alarm.capturing:
            break
    assert prober.alarm.capturing, "the alarm never opened its capture"
    assert tracemalloc.is_tracing()
    prober.stop()
    assert not prober.alarm.capturing
    assert not tracemalloc.is_tracing()
    assert prober.alarm.culprits is None


def test_capture_off():
    prober = memprobe.Prober(
        probes=["process"], on_leak=lambda v: None, leak_check_every=50,
        load_entrypoints=False, leak_options={"threshold_per_step": 16384},
        capture_on_leak=False)
    with prober:
        for step in range(4000):
            LEAKED.append(bytearray(64 * 1024))
            prober.sample(step)
            assert not tracemalloc.is_tracing()
            if prober.alarm.alarmed:
                break
        last = step
        for later in range(last + 1, last + 200):
            prober.sample(later)
            assert not tracemalloc.is_tracing()
    assert prober.alarm.alarmed and prober.alarm.culprits is None


@pytest.mark.parametrize("value, match", [
    ("yes", "capture_on_leak: must be a bool or a mapping"),
    ({"duration": 1}, "capture_on_leak.duration: unknown option"),
    ({"duration_seconds": -1}, "capture.duration_seconds: must be a number > 0"),
])
def test_bad_capture_option_is_named(value, match):
    with pytest.raises(memprobe.ConfigError, match=match):
        memprobe.Prober(probes=["gc"], on_leak="warn", capture_on_leak=value,
                        load_entrypoints=False)
    with pytest.raises(memprobe.ConfigError, match=match):
        memprobe.Prober(probes=["gc"], capture_on_leak=value, load_entrypoints=False)


def _report(culprits: tuple[str, ...]) -> memprobe.Report:
    key = "memprobe/process/rss_bytes"
    verdict = memprobe.Verdict(key, "leak", 65536.0, 60000.0, 70000.0, None, 100, 0,
                               culprits=culprits, prefix="memprobe")
    return memprobe.Report(verdicts={key: verdict}, prefix="memprobe")


def test_no_capture_when_the_verdict_already_names_the_culprit():
    """A tracemalloc or objects probe named it: no window is opened."""
    alarm = memprobe.LeakAlarm(lambda v: None, confirmations=1, capture=True)
    assert alarm.check(_report(("train.py:12",)))
    assert not alarm.capturing and not tracemalloc.is_tracing()
    alarm = memprobe.LeakAlarm(lambda v: None, confirmations=1,
                               capture={"duration_seconds": 60, "holders": False})
    try:
        assert alarm.check(_report(()))
        assert alarm.capturing and tracemalloc.is_tracing()
    finally:
        alarm.abandon_capture()
    assert not alarm.capturing and not tracemalloc.is_tracing()


def test_leak_alarm_capture_is_off_by_default():
    """The LeakAlarm built by hand (the RLlib adapter's) opens no capture unless asked."""
    alarm = memprobe.LeakAlarm(lambda v: None, confirmations=1)
    assert alarm.check(_report(()))
    assert not alarm.capturing and alarm.culprits is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_abandons_the_parents_capture():
    prober = memprobe.Prober(probes=["gc"], on_leak=lambda v: None, load_entrypoints=False,
                             leak_confirmations=1,
                             capture_on_leak={"duration_seconds": 600, "holders": False})
    with prober:
        prober.alarm.check(_report(()))
        assert prober.alarm.capturing
        pid = os.fork()
        if pid == 0:  # the child: no capture open, tracing released, a capture of its own later
            ok = not prober.alarm.capturing and not tracemalloc.is_tracing()
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert prober.alarm.capturing  # the parent's goes on
    assert not tracemalloc.is_tracing()


LEAK_C = r"""
#include <stdlib.h>
#include <string.h>
void *leaky_alloc(size_t n) { void *p = malloc(n); if (p) memset(p, 1, n); return p; }
void release(void *p) { free(p); }
"""


@pytest.fixture(scope="module")
def leaklib(tmp_path_factory):
    """A C library built here, whose ``malloc`` goes through its own PLT (where memray's
    hooks see it), loaded with ctypes."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("needs a C compiler")
    d = tmp_path_factory.mktemp("leaklib")
    (d / "leak.c").write_text(LEAK_C)
    so = d / "libleak.so"
    subprocess.run([gcc, "-O0", "-shared", "-fPIC", "-o", str(so), str(d / "leak.c")],
                   check=True)
    lib = ctypes.CDLL(str(so))
    lib.leaky_alloc.restype = ctypes.c_void_p
    lib.leaky_alloc.argtypes = [ctypes.c_size_t]
    lib.release.restype = None
    lib.release.argtypes = [ctypes.c_void_p]
    return lib


def _leak_in_c_until_captured(prober: memprobe.Prober, leaklib) -> int:
    """64 KiB per step from step 300 through the C library, the addresses kept, until
    the capture closed after an alarm; the buffers are freed after. Returns the
    leaking line."""
    kept: list[int] = []
    line = 0
    try:
        with prober:
            for step in range(6000):
                _cheap_step()
                if step >= 300:
                    kept.append(leaklib.leaky_alloc(64 * 1024)); line = _line()  # noqa: E702
                prober.sample(step)
                if prober.alarm.culprits is not None and prober.alarm.alarmed:
                    break
    finally:
        for p in kept:
            leaklib.release(p)
    return line


def test_native_capture_names_the_line_that_called_a_leaking_c_function(leaklib, tmp_path):
    """capture_on_leak={"native": True}: the memray window names the Python line that
    called the C function whose malloc leaks (tracemalloc cannot see it)."""
    pytest.importorskip("memray")
    path = tmp_path / "run.jsonl"
    prober = memprobe.Prober(
        probes=["process"], sink=str(path), on_leak=lambda v: None, leak_check_every=50,
        load_entrypoints=False, leak_options={"threshold_per_step": 16384},
        capture_on_leak={"duration_seconds": 0.3, "native": True, "holders": False})
    line = _leak_in_c_until_captured(prober, leaklib)
    culprits = prober.alarm.culprits
    assert culprits is not None, "the capture never closed"
    site = f"tests/test_alarm_capture.py:{line}"
    assert culprits.native_sites and culprits.native_sites[0].site == site, culprits.native_sites
    assert culprits.native_sites[0].size_bytes >= 64 * 1024
    # The verdicts that opened the capture name it (a metric that alarms while it is
    # open, such as the virtual size, does not).
    latest = prober.alarm.latest.verdicts
    assert any(site in latest[k].culprits for k in prober.alarm.alarmed), latest
    captured = [s.values for s in read_samples(path)
                if "memprobe/capture/duration_seconds" in s.values]
    assert make_key("memprobe", "capture", f"memray/top/{site}/size_bytes") in captured[0]
    assert not tracemalloc.is_tracing()


def test_capture_without_memray_names_the_users_line_that_keeps_native_memory(leaklib):
    """The default capture (no memray) of a leak made in C: tracemalloc sees only the
    few bytes of each address the user's line keeps, far less than the growth. The
    kind is native, and the user's line that keeps what holds it comes first."""
    fired: list[memprobe.Verdict] = []
    prober = memprobe.Prober(
        probes=["process", "gc"], on_leak=fired.append, leak_check_every=50,
        load_entrypoints=False, leak_options={"threshold_per_step": 16384},
        capture_on_leak={"duration_seconds": 0.3, "holders": False})
    line = _leak_in_c_until_captured(prober, leaklib)
    assert prober.alarm.culprits is not None, "the capture never closed"
    site = f"tests/test_alarm_capture.py:{line}"
    v = prober.alarm.latest.verdicts[fired[0].key]  # the verdict that opened the capture
    assert v.kind == "native", (v.kind, v.note)
    assert v.culprits[0] == site, v.culprits
    assert f"held by objects the user's lines keep ({site}" in v.note, v.note


def test_the_alarms_culprits_name_a_chain_of_frames_one_way(tmp_path):
    """A leak made inside a library call (``json.loads`` keeps a 64 KiB string a step):
    the capture's key spells the chain ``a.py:1--json/decoder.py:353``; the verdicts in
    ``prober.alarm.latest`` show every chain as reports do, ``a.py:1 → json/…``, the
    captured ones and the verdict's own alike."""
    import json

    doc = json.dumps(["x" * (64 * 1024)])
    for _ in range(2000):
        _cheap_step()
    prober = memprobe.Prober(
        probes=["process", "gc"], on_leak=lambda v: None, leak_check_every=50,
        load_entrypoints=False, leak_options={"threshold_per_step": 16384},
        capture_on_leak={"duration_seconds": 0.3, "holders_timeout_seconds": 60})
    line = 0
    with prober:
        for step in range(6000):
            _cheap_step()
            if step >= 1500:
                LEAKED.append(json.loads(doc)); line = _line()  # noqa: E702
            prober.sample(step)
            if prober.alarm.culprits is not None and prober.alarm.alarmed:
                break
    assert prober.alarm.culprits is not None, "the capture never closed"
    site = f"tests/test_alarm_capture.py:{line}"
    assert any(s.startswith(f"{site}--json/") for s, _, _ in prober.alarm.culprits.python_sites)
    culprits = [c for v in prober.alarm.latest.verdicts.values() for c in v.culprits]
    assert any(c.startswith(f"{site} → json/") for c in culprits), culprits
    assert not [c for c in culprits if "--" in c], culprits
