"""The entry-point cache: real distributions on disk, a real cache directory, fresh processes.

The cache must agree with importlib.metadata whenever the installation changes
(a distribution added, its entry points edited, removed), and a process that
finds it current must not import importlib.metadata nor the Ray sink.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memprobe import _entrypoints
from memprobe._entrypoints import EntryPoint, entry_points


def _scan_by_importlib() -> set[tuple[str, str, str]]:
    return {(ep.name, ep.value, ep.dist.name if ep.dist else "<unknown distribution>")
            for ep in importlib.metadata.entry_points(group="memprobe")}


def _as_set(eps: list[EntryPoint]) -> set[tuple[str, str, str]]:
    return {(e.name, e.value, e.dist_name) for e in eps}


def _dist(root: Path, eps: str) -> Path:
    info = root / "mpc_dist-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mpc-dist\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[memprobe]\n{eps}")
    return info


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv(_entrypoints.CACHE_ENV, str(where))
    return where


def test_the_cache_agrees_with_importlib_metadata_as_the_installation_changes(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    first = entry_points()  # a scan, written to the cache
    assert _as_set(first) == _scan_by_importlib()
    assert list(cache.iterdir()), "the scan was not cached"
    assert entry_points() == first  # read back from the cache

    info = _dist(site, "mpc = mpc_mod:plugin\n")
    added = _as_set(entry_points())
    assert ("mpc", "mpc_mod:plugin", "mpc-dist") in added
    assert added == _scan_by_importlib()

    (info / "entry_points.txt").write_text("[memprobe]\nmpc = mpc_other\n")
    os.utime(info / "entry_points.txt", ns=(1, 1))  # a different mtime, whatever the clock
    assert ("mpc", "mpc_other", "mpc-dist") in _as_set(entry_points())

    (info / "entry_points.txt").unlink()
    (info / "METADATA").unlink()
    info.rmdir()
    assert not any(e.name == "mpc" for e in entry_points())
    assert _as_set(entry_points()) == _scan_by_importlib()


def test_a_damaged_or_unwritable_cache_is_a_scan(cache: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _scan_by_importlib()
    entry_points()
    (only,) = cache.iterdir()
    only.write_text('{"fingerprint": [1, 2], "entry_points": 7')
    assert _as_set(entry_points()) == expected
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(_entrypoints.CACHE_ENV, str(blocker / "cache"))
    assert _as_set(entry_points()) == expected
    monkeypatch.setenv(_entrypoints.CACHE_ENV, "")  # off
    assert _entrypoints.cache_dir() is None
    assert _as_set(entry_points()) == expected


def test_entry_point_load_follows_module_and_attributes() -> None:
    assert EntryPoint("x", "os.path", "d").load() is os.path
    assert EntryPoint("x", "os:path.join", "d").load() is os.path.join
    assert EntryPoint("x", "os : path.join [extra]", "d").load() is os.path.join
    with pytest.raises(AttributeError):
        EntryPoint("x", "os:no_such_thing", "d").load()


def test_a_first_sample_with_a_current_cache_imports_no_metadata_nor_ray_sink(
        cache: Path) -> None:
    code = ("import sys, memprobe\n"
            "memprobe.Prober().sample()\n"
            "print(sorted(m for m in ('importlib.metadata', 'memprobe_ray._sink', "
            "'memprobe_ray._worker', 'memprobe_ray.dashboard') if m in sys.modules))\n")
    env = {**os.environ, _entrypoints.CACHE_ENV: str(cache)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env=env).stdout.strip() for _ in range(2)]
    assert runs[0] == "['importlib.metadata']"  # the scan that fills the cache
    assert runs[1] == "[]"


def test_the_ray_sink_still_loads_by_name(cache: Path) -> None:
    pytest.importorskip("memprobe_ray")
    import memprobe
    from memprobe._plugins import collect_sinks

    sinks = collect_sinks(memprobe.get_plugin_manager())
    assert sinks["ray_metrics"].plugin == "ray_metrics"


def test_one_cache_file_per_interpreter_whatever_sys_path(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(3):
        site = tmp_path / f"site{i}"
        site.mkdir()
        monkeypatch.syspath_prepend(str(site))
        entry_points()
    assert len(list(cache.iterdir())) == 1
