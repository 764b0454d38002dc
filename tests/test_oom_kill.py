"""The forecast of the time to out-of-memory against a real kill.

A fresh interpreter runs a Prober with its defaults (probes process and gc, a JSONL
sink, a callable ``on_leak``) and leaks at a steady rate inside a memory cgroup this
test makes, until the kernel's OOM killer kills it with SIGKILL. The test then reads
what the process wrote before it died: the forecast ``leak/hours_to_oom``, and the
culprits of the capture that the forecast opened.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import memprobe
from memprobe import keys

pytestmark = pytest.mark.slow

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: The cgroup's limit: the child starts at about 25 MiB, so it leaks about 490 MiB.
LIMIT_BYTES = 512 << 20
#: The leak: 1 MiB per sample at 20 samples/s, about 25 s to the kill.
CHUNK_BYTES = 1 << 20
RATE_HZ = 20.0
#: The forecast judged: the first one made once the leak had run for this share of its time.
JUDGED_AT = 0.2
#: Its largest error allowed, as a share of the real time left to the kill.
TOLERANCE = 0.3

LEAKY = textwrap.dedent('''\
    """Leaks CHUNK bytes per sample at RATE samples/s until its memory limit kills it."""
    import sys
    import time

    import memprobe

    path, chunk_bytes, rate_hz = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    kept = []
    alarms = []
    with memprobe.Prober(["process", "gc"], sink=memprobe.JsonlSink(path),
                         on_leak=alarms.append) as prober:
        start = time.monotonic()
        for i in range(10**7):
            kept.append(bytearray(chunk_bytes))  # the leak
            prober.sample(step=i)
            delay = start + (i + 1) / rate_hz - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    ''')


def _v1_cgroup(name: str) -> tuple[Path, Path]:
    """A cgroup v1 memory cgroup with the limit set (swap included where it is
    accounted); returns it and the file that counts its OOM kills."""
    d = CGROUP_ROOT / "memory" / name
    d.mkdir()
    (d / "memory.limit_in_bytes").write_text(str(LIMIT_BYTES))
    memsw = d / "memory.memsw.limit_in_bytes"
    if memsw.exists():
        memsw.write_text(str(LIMIT_BYTES))
    return d, d / "memory.oom_control"


def _v2_cgroup(name: str) -> tuple[Path, Path]:
    """A cgroup v2 cgroup under the root with ``memory.max`` set and no swap."""
    if "memory" not in (CGROUP_ROOT / "cgroup.subtree_control").read_text().split():
        raise OSError("the memory controller is not enabled for the root's children")
    d = CGROUP_ROOT / name
    d.mkdir()
    (d / "memory.max").write_text(str(LIMIT_BYTES))
    swap = d / "memory.swap.max"
    if swap.exists():
        swap.write_text("0")
    return d, d / "memory.events"


def _oom_kills(events: Path) -> int:
    """The cgroup's OOM kills (the ``oom_kill`` line of its events or oom_control)."""
    for line in events.read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill":
            return int(value)
    return 0


@pytest.fixture
def memory_cgroup() -> Iterator[tuple[Path, Path]]:
    """A fresh memory cgroup limited to :data:`LIMIT_BYTES`, removed afterwards; the
    test is skipped where none can be made (not root, no memory controller)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("memory cgroups are Linux's")
    name = f"memprobe-test-{uuid.uuid4().hex[:8]}"
    v1 = (CGROUP_ROOT / "memory" / "memory.limit_in_bytes").exists()
    try:
        made, events = _v1_cgroup(name) if v1 else _v2_cgroup(name)
    except BaseException as exc:
        half_made = CGROUP_ROOT / ("memory" if v1 else "") / name
        if half_made.is_dir():
            half_made.rmdir()
        if not isinstance(exc, OSError):
            raise
        pytest.skip(f"cannot make a memory cgroup with a limit under {CGROUP_ROOT} "
                    f"(cgroup {'v1' if v1 else 'v2'}): {exc}")
    try:
        yield made, events
    finally:
        for _ in range(50):  # its last process may take a moment to leave
            try:
                made.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def _forecasts(samples: list[memprobe.Sample]) -> list[tuple[float, float]]:
    """(time, hours to out-of-memory) of each sample that carries a forecast."""
    key = keys.make_key("memprobe", "leak", "hours_to_oom")
    return [(s.time_seconds, float(s.values[key])) for s in samples
            if s.values.get(key, -1) > 0]


def _captured_sites(samples: list[memprobe.Sample]) -> list[tuple[float, str, float]]:
    """(time, site, bytes kept) of the Python lines in the alarm capture's lines."""
    head = keys.prefix_path("memprobe") + "capture"
    out = []
    for s in samples:
        if head + "/duration_seconds" not in s.values:
            continue
        for k, v in s.values.items():
            if not k.startswith(head + "/tracemalloc/") or not k.endswith("/size_bytes"):
                continue
            site = keys.site_name(keys.split_key(k, head).metric)
            if site is not None:
                out.append((s.time_seconds, site, float(v)))
    return out


def test_the_forecast_and_the_culprit_are_on_record_before_the_oom_kill(
        tmp_path, memory_cgroup) -> None:
    cgroup, events = memory_cgroup
    script = tmp_path / "leaky.py"
    script.write_text(LEAKY)
    leak_line = next(n for n, line in enumerate(LEAKY.splitlines(), 1) if "# the leak" in line)
    path = tmp_path / "run.jsonl"
    kills_before = _oom_kills(events)
    # The shell joins the cgroup, then becomes the interpreter: all of its memory counts.
    command = (f'echo $$ > "{cgroup}/cgroup.procs" && exec "{sys.executable}" '
               f'"{script}" "{path}" {CHUNK_BYTES} {RATE_HZ}')
    child = subprocess.Popen(["sh", "-c", command], stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    died = time.time()
    assert child.returncode == -signal.SIGKILL, (child.returncode, stderr)
    assert _oom_kills(events) > kills_before, "killed, but not by the cgroup's OOM killer"

    with warnings.catch_warnings():  # the kill may cut the last line
        warnings.filterwarnings("ignore", ".*truncated last line", memprobe.MemprobeWarning)
        samples = memprobe.read_samples(path)
    start = samples[0].time_seconds  # the first sample follows the first leaked chunk
    run = died - start
    assert run > 10, f"killed {run:.1f} s into the leak: too soon to judge a forecast"

    # (a) The forecast was exported before the kill.
    forecasts = _forecasts(samples)
    assert forecasts and forecasts[0][0] < died, forecasts

    # (b) Once the leak had run for a fifth of its time, the forecast is within 30% of
    # the real time left.
    t, hours = next(f for f in forecasts if f[0] - start >= JUDGED_AT * run)
    left = died - t
    error = (t + hours * 3600 - died) / left
    print(f"killed {run:.1f} s into the leak; at {t - start:.1f} s the forecast was "
          f"{hours * 3600:.1f} s to the kill, the truth {left:.1f} s: error {error:+.1%}")
    assert abs(error) <= TOLERANCE, (error, forecasts, died)

    # (c) The capture the forecast opened named the leaking line before the kill.
    captured = _captured_sites(samples)
    assert captured, "no capture line in the file"
    when, site, kept = max(captured, key=lambda c: c[2])
    assert when < died and site.endswith(f"leaky.py:{leak_line}"), captured
    assert kept >= 10 * CHUNK_BYTES, captured
