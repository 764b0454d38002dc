"""The plugin manager: built-ins as plugins, entry-point discovery, disabling, duplicates."""

from __future__ import annotations

import pytest

import memprobe
from memprobe._plugins import collect_probes


def test_builtins_are_ordinary_plugins() -> None:
    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    registry = collect_probes(pm)
    assert {"process", "gc", "tracemalloc", "objects"} <= set(registry)
    assert registry["process"].plugin == "process"
    assert "example" not in registry


def test_example_plugin_is_found_through_its_entry_point() -> None:
    registry = collect_probes(memprobe.get_plugin_manager())
    info = registry["example"]
    assert info.plugin == "example"
    assert info.factory.__module__ == "memprobe_example.plugin"
    with memprobe.Prober(["process", "example"]) as prober:
        values = prober.sample()
    assert values["memprobe/example/modules_count"] > 10
    assert values["memprobe/example/samples_count"] == 1


def test_disable_env_var_skips_named_plugins(monkeypatch) -> None:
    monkeypatch.setenv("MEMPROBE_DISABLE_PLUGINS", "example, objects")
    registry = collect_probes(memprobe.get_plugin_manager())
    assert "example" not in registry and "objects" not in registry
    assert "process" in registry
    with pytest.raises(memprobe.ConfigError, match="unknown probe 'example'"):
        memprobe.Prober(["example"])


def test_duplicate_probe_name_keeps_the_first_and_names_both() -> None:
    class Impostor:
        @memprobe.hookimpl
        def memprobe_register_probes(self, register) -> None:
            register("process", dict)

    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(Impostor(), name="impostor")
    with pytest.warns(memprobe.PluginWarning, match="'impostor'.*'process'"):
        registry = collect_probes(pm)
    assert registry["process"].plugin == "process"


def test_plugin_option_errors_come_from_the_plugin() -> None:
    with pytest.raises(memprobe.ConfigError, match=r"example\.scale"):
        memprobe.Prober({"example": {"scale": 0}})


def test_disable_env_var_is_case_insensitive_and_named_in_the_error(monkeypatch) -> None:
    monkeypatch.setenv("MEMPROBE_DISABLE_PLUGINS", "Process, GC")
    registry = collect_probes(memprobe.get_plugin_manager(load_entrypoints=False))
    assert "process" not in registry and "gc" not in registry
    with pytest.raises(memprobe.ConfigError,
                       match="unknown probe 'process': it is disabled by "
                             "MEMPROBE_DISABLE_PLUGINS"):
        memprobe.Prober(["process"], load_entrypoints=False)


def test_disable_env_var_warns_on_names_that_are_no_plugin(monkeypatch) -> None:
    from memprobe import _plugins

    monkeypatch.setenv("MEMPROBE_DISABLE_PLUGINS", "objects,no_such_plugin_xyz")
    monkeypatch.setattr(_plugins, "_REPORTED", set())
    with pytest.warns(memprobe.PluginWarning,
                      match="'no_such_plugin_xyz'.*not an installed plugin"):
        memprobe.get_plugin_manager()


class _SlowEntryPoint:
    """An entry point whose import takes over the slow-import threshold (a real sleep)."""

    name = "sleepy"
    value = "sleepy_plugin"

    class dist:
        name = "sleepy-dist"

    def load(self):
        import time
        import types

        time.sleep(1.2)
        module = types.ModuleType("sleepy_plugin")

        @memprobe.hookimpl
        def memprobe_register_probes(register):
            pass

        module.memprobe_register_probes = memprobe_register_probes
        return module


def test_a_slow_entry_point_is_reported_with_its_distribution(monkeypatch) -> None:
    from memprobe import _plugins

    monkeypatch.setattr(_plugins, "_entry_points", lambda: [_SlowEntryPoint()])
    monkeypatch.setattr(_plugins, "_REPORTED", set())
    with pytest.warns(memprobe.PluginWarning, match=r"'sleepy'.*'sleepy-dist' took 1\.\d s"):
        pm = memprobe.get_plugin_manager()
    assert pm.get_plugin("sleepy") is not None


def test_probe_info_metrics_are_declarations() -> None:
    registry = collect_probes(memprobe.get_plugin_manager())
    gc_metrics = registry["gc"].metrics
    assert gc_metrics["gen<N>/collections_count"] == memprobe.Metric(
        "collections of generation N since the process started", "count", "counter")
    assert gc_metrics["collection_seconds"].kind == "interval"
    assert registry["example"].metrics["samples_count"].kind == "counter"
    for info in registry.values():
        assert all(isinstance(m, memprobe.Metric) for m in info.metrics.values())


def test_import_memprobe_loads_no_entry_points_nor_statistics() -> None:
    import subprocess
    import sys

    code = ("import sys, memprobe\n"
            "heavy = ['importlib.metadata', 'statistics', 'memprobe.leaks', 'memprobe_example',"
            " 'orjson', 'psutil', 'tracemalloc']\n"
            "print([m for m in heavy if m in sys.modules])\n"
            "memprobe.Report, memprobe.check_leaks\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
