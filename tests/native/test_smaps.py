"""The ``smaps`` probe on real mappings: private and shared anonymous memory, a mapped file."""

from __future__ import annotations

import mmap
import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memprobe
from memprobe.metrics import lookup
from memprobe.probes.smaps import SmapsProbe, parse_kb_fields

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux /proc/self/smaps_rollup"
)

MiB = 1 << 20
SIZE = 64 * MiB
PAGE = mmap.PAGESIZE


@pytest.fixture
def probe():
    p = SmapsProbe()
    p.start()
    yield p
    p.stop()


def _touch_write(m: mmap.mmap) -> None:
    for off in range(0, len(m), PAGE):
        m[off] = 1


def _touch_read(m: mmap.mmap) -> int:
    return sum(m[off] for off in range(0, len(m), PAGE))


def test_private_anonymous_mmap_grows_anonymous_and_private_dirty_bytes(probe):
    before = probe.sample()
    m = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        _touch_write(m)
        after = probe.sample()
    finally:
        m.close()
    assert after["anonymous_bytes"] - before["anonymous_bytes"] >= SIZE - 4 * MiB
    assert after["private_dirty_bytes"] - before["private_dirty_bytes"] >= SIZE - 4 * MiB
    assert abs(after["file_bytes"] - before["file_bytes"]) < 8 * MiB
    assert abs(after["shmem_bytes"] - before["shmem_bytes"]) < 4 * MiB


def test_shared_anonymous_mmap_grows_shmem_bytes(probe):
    before = probe.sample()
    m = mmap.mmap(-1, SIZE, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    try:
        _touch_write(m)
        after = probe.sample()
    finally:
        m.close()
    assert after["shmem_bytes"] - before["shmem_bytes"] >= SIZE - 4 * MiB
    assert after["anonymous_bytes"] - before["anonymous_bytes"] < 8 * MiB


def test_file_mmap_left_open_grows_file_bytes(probe, tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"\x01" * SIZE)  # in the page cache now
    before = probe.sample()
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        assert _touch_read(m) == SIZE // PAGE
        after = probe.sample()
    finally:
        m.close()
    assert after["file_bytes"] - before["file_bytes"] >= SIZE - 4 * MiB
    assert after["anonymous_bytes"] - before["anonymous_bytes"] < 8 * MiB
    assert after["rss_bytes"] - before["rss_bytes"] >= SIZE - 8 * MiB


def test_kinds_add_up_to_rss(probe):
    out = probe.sample()
    kinds = out["anonymous_bytes"] + out["file_bytes"] + out["shmem_bytes"]
    assert kinds == out["rss_bytes"]
    assert 0 < out["pss_bytes"] <= out["rss_bytes"]


def test_rollup_false_reads_the_counters_alone():
    p = SmapsProbe(rollup=False)
    p.start()
    try:
        out = p.sample()
    finally:
        p.stop()
    assert set(out) == {"rss_bytes", "anonymous_bytes", "file_bytes", "shmem_bytes",
                        "swap_bytes"}


def test_prober_emits_smaps_keys_declared_in_bytes():
    prober = memprobe.Prober(probes=["smaps"], load_entrypoints=False).start()
    try:
        values = prober.sample(force=True)
    finally:
        prober.stop()
    for metric in ("anonymous_bytes", "file_bytes", "shmem_bytes", "swap_bytes",
                   "private_dirty_bytes", "rss_bytes", "pss_bytes"):
        assert values[f"memprobe/smaps/{metric}"] >= 0
        assert lookup(SmapsProbe.metrics, metric).unit == "bytes"


def test_forked_child_reads_its_own_proc_files(probe):
    probe.sample()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: grow 64 MiB of private memory and report what the probe sees
        try:
            m = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            base = probe.sample()["anonymous_bytes"]
            _touch_write(m)
            os.write(w, str(probe.sample()["anonymous_bytes"] - base).encode())
        finally:
            os._exit(0)
    os.close(w)
    grown = int(os.read(r, 64) or b"0")
    os.close(r)
    os.waitpid(pid, 0)
    assert grown >= SIZE - 4 * MiB


def test_bad_rollup_option_names_it():
    with pytest.raises(memprobe.ConfigError, match=r"smaps\.rollup: must be a bool"):
        SmapsProbe(rollup=1)  # type: ignore[arg-type]


def test_other_platforms_are_unsupported(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(memprobe.ProbeError, match=r"unsupported: .*Linux only, not darwin"):
        SmapsProbe().start()


_NAMES = st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll"), max_codepoint=127),
                 min_size=1, max_size=12)


@settings(deadline=None)  # a shared 2-core box: wall-clock deadlines are noise
@given(st.dictionaries(_NAMES, st.integers(0, 2**40), max_size=8), st.lists(_NAMES, max_size=4))
def test_parse_kb_fields_reads_back_what_the_kernel_format_holds(fields, noise):
    lines = [f"{name}:{' ' * 8}{kb} kB" for name, kb in fields.items()]
    lines += [f"{name}:\tnot a number" for name in noise if name not in fields]
    wanted = {name.encode(): f"{name}_bytes" for name in fields}
    out = parse_kb_fields("\n".join(lines).encode(), wanted)
    assert out == {f"{name}_bytes": kb * 1024 for name, kb in fields.items()}
