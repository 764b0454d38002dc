"""Broken entry points: real distributions on disk, found by importlib.metadata.

Each broken one is reported once, with a PluginWarning naming its
distribution; the built-ins, the installed memprobe_example plugin and a
good plugin next to the broken ones still load and sample.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import memprobe
from memprobe import _plugins
from memprobe._plugins import collect_probes

GOOD_PLUGIN = """\
import memprobe

class GoodProbe:
    def start(self): pass
    def stop(self): pass
    def sample(self):
        return {"answer_count": 42}

@memprobe.hookimpl
def memprobe_register_probes(register):
    register("good", GoodProbe)
"""


def make_dist(root: Path, dist: str, entry_points: dict[str, str],
              modules: dict[str, str]) -> None:
    """A real installed distribution: ``<dist>-1.0.dist-info`` and its top-level modules."""
    info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    eps = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[memprobe]\n{eps}")
    for mod, source in modules.items():
        (root / f"{mod}.py").write_text(textwrap.dedent(source))


#: distribution -> (entry points, modules, what its one warning must say)
BROKEN = {
    "memprobe-broken-import": (
        {"broken_import": "mpf_broken_import"},
        {"mpf_broken_import": "raise ImportError('needs libfoo.so')\n"},
        "could not be imported: ImportError: needs libfoo.so",
    ),
    "memprobe-exits-on-import": (
        {"exits": "mpf_exits"},
        {"mpf_exits": "import sys\nsys.exit('no GPU here')\n"},
        "could not be imported: SystemExit: no GPU here",
    ),
    "memprobe-missing-attr": (
        {"missing_attr": "mpf_missing_attr:plugin"},
        {"mpf_missing_attr": "other = 1\n"},
        "could not be imported: AttributeError",
    ),
    "memprobe-wrong-object": (
        {"wrong_object": "mpf_wrong_object:VALUE"},
        {"mpf_wrong_object": "VALUE = 42\n"},
        "was not loaded: 42 has no memprobe hooks",
    ),
    "memprobe-typo-hook": (
        {"typo_hook": "mpf_typo_hook"},
        {"mpf_typo_hook": "import memprobe\n\n@memprobe.hookimpl\n"
                          "def memprobe_register_probe(register):\n    pass\n"},
        "implements unknown hook 'memprobe_register_probe' "
        "(did you mean 'memprobe_register_probes'?)",
    ),
    "memprobe-bad-signature": (
        {"bad_signature": "mpf_bad_signature"},
        {"mpf_bad_signature": "import memprobe\n\n@memprobe.hookimpl\n"
                              "def memprobe_register_probes(reg, extra):\n    pass\n"},
        "could not be registered: PluginValidationError",
    ),
    "memprobe-register-raises": (
        {"register_raises": "mpf_register_raises"},
        {"mpf_register_raises": "import memprobe\n\n@memprobe.hookimpl\n"
                                "def memprobe_register_probes(register):\n"
                                "    raise RuntimeError('register exploded')\n"},
        "failed in memprobe_register_probes and registers no probes: "
        "RuntimeError: register exploded",
    ),
    "memprobe-dup-builtin": (
        {"process": "mpf_dup_builtin"},
        {"mpf_dup_builtin": GOOD_PLUGIN},
        "'process' (mpf_dup_builtin) from distribution 'memprobe-dup-builtin' was not "
        "loaded: a plugin of that name is already registered by memprobe (a built-in)",
    ),
    "memprobe-dup-good": (  # later on sys.path than memprobe-good, so it loses
        {"good": "mpf_dup_good"},
        {"mpf_dup_good": GOOD_PLUGIN},
        "a plugin of that name is already registered by distribution 'memprobe-good'",
    ),
    "memprobe-dup-example": (  # after site-packages on sys.path: the installed example wins
        {"example": "mpf_dup_example"},
        {"mpf_dup_example": GOOD_PLUGIN},
        "already registered by distribution 'memprobe-example'",
    ),
}


@pytest.fixture(autouse=True)
def fresh_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plugin faults are reported once per process: start each test with none reported."""
    monkeypatch.setattr(_plugins, "_REPORTED", set())


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Every distribution of BROKEN plus memprobe-good, installed for real on sys.path."""
    first, second, last = tmp_path / "first", tmp_path / "second", tmp_path / "last"
    make_dist(first, "memprobe-good", {"good": "mpf_good"}, {"mpf_good": GOOD_PLUGIN})
    for dist, (eps, modules, _) in BROKEN.items():
        root = {"memprobe-dup-good": second, "memprobe-dup-example": last}.get(dist, first)
        make_dist(root, dist, eps, modules)
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    monkeypatch.setattr(sys, "path", [*sys.path, str(last)])
    importlib.invalidate_caches()
    yield
    for mod in [m for m in sys.modules if m.startswith("mpf_")]:
        del sys.modules[mod]
    importlib.invalidate_caches()


def test_each_broken_distribution_is_reported_once_by_name(installed) -> None:
    with pytest.warns(memprobe.PluginWarning) as rec:
        pm = memprobe.get_plugin_manager()
        registry = collect_probes(pm)
    messages = [str(w.message) for w in rec]
    for dist, (_, _, fragment) in BROKEN.items():
        mine = [m for m in messages if f"from distribution {dist!r}" in m]
        assert len(mine) == 1, (dist, messages)
        assert fragment in mine[0], (dist, mine[0])
    assert len(messages) == len(BROKEN), messages
    # the others load: built-ins, the installed example, the good plugin
    assert {"process", "gc", "tracemalloc", "objects", "example", "good"} <= set(registry)
    assert registry["example"].factory.__module__ == "memprobe_example.plugin"
    assert registry["good"].factory.__module__ == "mpf_good"
    assert registry["process"].plugin == "process"
    assert pm.get_plugin("wrong_object") is None and pm.get_plugin("typo_hook") is None


def test_the_working_plugins_sample_next_to_the_broken_ones(installed) -> None:
    with pytest.warns(memprobe.PluginWarning):
        prober = memprobe.Prober(["process", "gc", "example", "good"])
    with prober:
        values = prober.sample()
    assert values["memprobe/process/rss_bytes"] > 0
    assert "memprobe/gc/gen0/count" in values
    assert values["memprobe/example/modules_count"] > 10
    assert values["memprobe/good/answer_count"] == 42
    assert not any("/errors/" in k for k in values)


def test_reported_once_per_process_not_once_per_prober(installed) -> None:
    with pytest.warns(memprobe.PluginWarning):
        memprobe.Prober(["good"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second report would raise here
        for _ in range(3):
            with memprobe.Prober(["good"]) as prober:
                assert prober.sample()["memprobe/good/answer_count"] == 42


def test_disabled_broken_plugins_are_not_loaded_at_all(installed, monkeypatch) -> None:
    names = [name for eps, _, _ in BROKEN.values() for name in eps]
    names.remove("process")  # disabling these would skip the built-in and the good plugin too
    names.remove("good")
    monkeypatch.setenv("MEMPROBE_DISABLE_PLUGINS", ",".join(names))
    with pytest.warns(memprobe.PluginWarning) as rec:
        registry = collect_probes(memprobe.get_plugin_manager())
    reported = sorted(str(w.message).split("from distribution ")[1].split()[0] for w in rec)
    assert reported == ["'memprobe-dup-builtin'", "'memprobe-dup-good'"]
    assert "good" in registry and "example" not in registry  # "example" was disabled by name
    assert "mpf_broken_import" not in sys.modules


def test_probe_registered_twice_names_both_distributions(installed, tmp_path, monkeypatch) -> None:
    extra = tmp_path / "extra"
    make_dist(extra, "memprobe-also-good", {"also_good": "mpf_also_good"},
              {"mpf_also_good": GOOD_PLUGIN})  # registers the probe "good" again
    monkeypatch.setattr(sys, "path", [*sys.path, str(extra)])
    importlib.invalidate_caches()
    with pytest.warns(memprobe.PluginWarning) as rec:
        registry = collect_probes(memprobe.get_plugin_manager())
    (dup,) = [str(w.message) for w in rec if "also-good" in str(w.message)]
    assert dup == (
        "probe 'good' registered by plugin 'also_good' from distribution 'memprobe-also-good' "
        "is ignored: plugin 'good' from distribution 'memprobe-good' registered it first"
    )
    assert registry["good"].factory.__module__ == "mpf_good"
