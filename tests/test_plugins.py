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
