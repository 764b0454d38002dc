"""Bad configuration fails fast, in the driver, with a ConfigError naming the option.

Tables of (options, the option named, a fragment of the message) for the
Prober, every built-in probe and MemoryProbeCallback.configure.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import memprobe

NAN = math.nan
INF = math.inf

PROBER_CASES: list[tuple[dict[str, Any], str, str]] = [
    # probes=
    ({"probes": "process"}, "probes", "got the str 'process'"),
    ({"probes": 42}, "probes", "must be a list of names or a mapping"),
    ({"probes": [1]}, "probes", "probe names must be str, got 1"),
    ({"probes": ["process", "process"]}, "probes", "probe 'process' is named twice"),
    ({"probes": {1: {}}}, "probes", "probe names must be str, got 1"),
    ({"probes": {"process": 3}}, "probes.process", "options must be a mapping, got 3"),
    ({"probes": {"process": {1: 2}}}, "probes.process", "option names must be str, got 1"),
    ({"probes": ["proces"]}, "probes", "unknown probe 'proces'; did you mean 'process'?"),
    ({"probes": ["tracemaloc"]}, "probes", "did you mean 'tracemalloc'"),
    ({"probes": ["gcc"]}, "probes", "did you mean 'gc'"),
    ({"probes": ["zzzz"]}, "probes", "unknown probe 'zzzz' (installed: "),
    # Prober options
    ({"every": 0}, "every", "must be an int >= 1, got 0"),
    ({"every": 1.5}, "every", "must be an int >= 1, got 1.5"),
    ({"every": "2"}, "every", "got '2'"),
    ({"every": True}, "every", "got True"),
    ({"every": None}, "every", "got None"),
    ({"interval_seconds": -1}, "interval_seconds", "must be a number of seconds >= 0"),
    ({"interval_seconds": NAN}, "interval_seconds", "got nan"),
    ({"interval_seconds": "1s"}, "interval_seconds", "got '1s'"),
    ({"budget": 0}, "budget", "must be a fraction in (0, 1], got 0"),
    ({"budget": 1.5}, "budget", "got 1.5"),
    ({"budget": NAN}, "budget", "got nan"),
    ({"budget": "1%"}, "budget", "got '1%'"),
    ({"budget": True}, "budget", "got True"),
    ({"history": 0}, "history", "must be an int >= 1, got 0"),
    ({"history": 10.0}, "history", "got 10.0"),
    ({"max_failures": 0}, "max_failures", "must be an int >= 1"),
    ({"max_site_keys": -1}, "max_site_keys", "must be an int >= 0, got -1"),
    ({"prefix": 3}, "prefix", "must be a str, got 3"),
    ({"prefix": None}, "prefix", "must be a str, got None"),
    ({"sink": 42}, "sink", "must be a path or an object with write(), got 42"),
    ({"tags": {"role": "x"}}, "tags", "only apply when sink is a path"),
    ({"sink": "x.jsonl", "tags": ["role"]}, "tags", "must be a mapping, got ['role']"),
    ({"sink": "x.jsonl", "tags": {1: "x"}}, "tags", "keys must be str, got 1"),
    ({"sink": "x.jsonl", "tags": {"values": 1}}, "tags", "'values' is a field of every"),
    ({"sink": "x.jsonl", "tags": {"obj": object()}}, "tags.obj", "cannot be written as JSON"),
    ({"sink": "x.jsonl", "tags": {"x": NAN}}, "tags.x", "cannot be written as JSON"),
    ({"load_entrypoints": "no"}, "load_entrypoints", "must be a bool, got 'no'"),
    ({"plugin_manager": object()}, "plugin_manager", "must be a pluggy.PluginManager"),
    ({"time_limit_seconds": 0}, "time_limit_seconds", "must be a number of seconds > 0"),
    ({"time_limit_seconds": -1}, "time_limit_seconds", "got -1"),
    ({"time_limit_seconds": INF}, "time_limit_seconds", "must be finite"),
    ({"time_limit_seconds": "1"}, "time_limit_seconds", "got '1'"),
    ({"on_leak": "raise"}, "on_leak", "must be a callable or 'warn', got 'raise'"),
    ({"on_leak": 3}, "on_leak", "got 3"),
    ({"leak_check_every": 0}, "leak_check_every", "must be an int >= 1"),
    ({"leak_options": [1]}, "leak_options", "must be a mapping"),
    ({"leak_options": {"min_point": 5}}, "leak_options.min_point",
     "unknown option; did you mean 'min_points'?"),
    # every probe's schedule and guard options
    ({"probes": {"gc": {"every": 0}}}, "probes.gc.every", "must be an int >= 1"),
    ({"probes": {"gc": {"interval_seconds": -5}}}, "probes.gc.interval_seconds", "got -5"),
    ({"probes": {"gc": {"time_limit_seconds": 0}}}, "probes.gc.time_limit_seconds", "> 0"),
    ({"probes": {"gc": {"time_limit_seconds": "fast"}}}, "probes.gc.time_limit_seconds",
     "got 'fast'"),
    ({"probes": {"gc": {"max_keys": 0}}}, "probes.gc.max_keys", "must be an int >= 1, got 0"),
    ({"probes": {"gc": {"max_keys": 1.5}}}, "probes.gc.max_keys", "got 1.5"),
    ({"probes": {"gc": {"isolate": "yes"}}}, "probes.gc.isolate", "must be a bool, got 'yes'"),
    ({"probes": {"gc": {"isolate": 1}}}, "probes.gc.isolate", "must be a bool, got 1"),
    # conflicting: isolation needs a time limit to abandon a hung probe
    ({"probes": {"gc": {"isolate": True}}}, "probes.gc.isolate", "needs a time limit"),
    # unknown option names of a probe, with suggestions
    ({"probes": {"process": {"ful": True}}}, "probes.process",
     "unknown option 'ful'; did you mean 'full'?"),
    ({"probes": {"gc": {"time_limit": 1}}}, "probes.gc",
     "unknown option 'time_limit'; did you mean 'time_limit_seconds'?"),
    ({"probes": {"tracemalloc": {"frames": 5}}}, "probes.tracemalloc",
     "unknown option 'frames'"),
    # process
    ({"probes": {"process": {"full": "yes"}}}, "process.full", "must be a bool, got 'yes'"),
    ({"probes": {"process": {"fds": 1}}}, "process.fds", "must be a bool, got 1"),
    ({"probes": {"process": {"pid": 0}}}, "process.pid", "must be a positive int, got 0"),
    ({"probes": {"process": {"pid": -3}}}, "process.pid", "got -3"),
    ({"probes": {"process": {"pid": "1"}}}, "process.pid", "got '1'"),
    ({"probes": {"process": {"pid": True}}}, "process.pid", "got True"),
    # gc
    ({"probes": {"gc": {"collect": "always"}}}, "gc.collect", "must be a bool, got 'always'"),
    # objects
    ({"probes": {"objects": {"top": -1}}}, "objects.top", "must be an int >= 0, got -1"),
    ({"probes": {"objects": {"top": True}}}, "objects.top", "got True"),
    ({"probes": {"objects": {"collect": None}}}, "objects.collect", "must be a bool"),
    # tracemalloc
    ({"probes": {"tracemalloc": {"top": "ten"}}}, "tracemalloc.top", "got 'ten'"),
    ({"probes": {"tracemalloc": {"top": -2}}}, "tracemalloc.top", "must be an int >= 0"),
    ({"probes": {"tracemalloc": {"nframe": 0}}}, "tracemalloc.nframe", "from 1 to 100, got 0"),
    ({"probes": {"tracemalloc": {"nframe": 101}}}, "tracemalloc.nframe", "got 101"),
    ({"probes": {"tracemalloc": {"nframe": 2.0}}}, "tracemalloc.nframe", "got 2.0"),
    ({"probes": {"tracemalloc": {"group_by": "file"}}}, "tracemalloc.group_by",
     "must be one of ('lineno', 'traceback', 'user'), got 'file'"),
    ({"probes": {"tracemalloc": {"exclude": "ray/*"}}}, "tracemalloc.exclude",
     "must be a list of filename patterns, got 'ray/*'"),
    ({"probes": {"tracemalloc": {"exclude": [1]}}}, "tracemalloc.exclude", "got [1]"),
    ({"probes": {"tracemalloc": {"window_steps": 2}}}, "tracemalloc.window_steps",
     "window_steps and period_steps go together"),
    ({"probes": {"tracemalloc": {"period_steps": 10}}}, "tracemalloc.window_steps",
     "window_steps and period_steps go together"),
    ({"probes": {"tracemalloc": {"window_steps": 10, "period_steps": 10}}},
     "tracemalloc.window_steps", "must be less than period_steps (10), got 10"),
    ({"probes": {"tracemalloc": {"window_steps": 0, "period_steps": 10}}},
     "tracemalloc.window_steps", "must be an int >= 1, got 0"),
    ({"probes": {"tracemalloc": {"window_steps": 1, "period_steps": 2.5}}},
     "tracemalloc.period_steps", "must be an int >= 1, got 2.5"),
]


def _id(case: tuple[dict[str, Any], str, str]) -> str:
    return case[1] + ":" + repr(case[0])[:40]


@pytest.mark.parametrize(("options", "option", "fragment"), PROBER_CASES,
                         ids=[_id(c) for c in PROBER_CASES])
def test_prober_rejects_bad_options(options: dict[str, Any], option: str, fragment: str,
                                    tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a sink path that slipped through would land here
    with pytest.raises(memprobe.ConfigError) as info:
        memprobe.Prober(**{"load_entrypoints": False, **options})
    assert info.value.option == option
    assert fragment in info.value.message, info.value.message
    assert str(info.value) == f"{option}: {info.value.message}"
    assert not list(tmp_path.iterdir())  # nothing was opened or written


def test_bad_options_of_a_probe_do_not_start_anything() -> None:
    import tracemalloc

    was = tracemalloc.is_tracing()
    with pytest.raises(memprobe.ConfigError, match=r"tracemalloc\.top"):
        memprobe.Prober({"process": {}, "tracemalloc": {"top": -1}})
    assert tracemalloc.is_tracing() == was


def test_watch_passes_bad_options_through_as_config_errors() -> None:
    with pytest.raises(memprobe.ConfigError) as info:
        memprobe.watch(range(3), probes=["gc"], every=0)
    assert info.value.option == "every"
    with pytest.raises(memprobe.ConfigError) as info:
        memprobe.watch(range(3), probes=["gc"], histroy=5)
    assert info.value.option == "histroy"
    assert "did you mean 'history'?" in info.value.message


CALLBACK_CASES: list[tuple[dict[str, Any], str, str]] = [
    ({"prob": ["gc"]}, "MemoryProbeCallback.configure",
     "unknown option 'prob' (did you mean 'probes'?)"),
    ({"trigger": "step"}, "trigger", "must be one of ('episode', 'sample'), got 'step'"),
    ({"env_runners": "yes"}, "env_runners", "must be a bool, got 'yes'"),
    ({"driver": 1}, "driver", "must be a bool, got 1"),
    ({"learners": None}, "learners", "must be a bool, got None"),
    ({"load_entrypoints": "no"}, "load_entrypoints", "must be a bool"),
    ({"env_runners": False, "driver": False, "learners": False}, "env_runners",
     "nothing would be probed"),
    ({"plugins": "my_plugin"}, "plugins", "must be a list of module names, got 'my_plugin'"),
    ({"plugins": 42}, "plugins", "got 42"),
    ({"plugins": [1]}, "plugins", "got [1]"),
    ({"plugins": ["no_such_module_for_memprobe"]}, "plugins",
     "cannot import plugin module 'no_such_module_for_memprobe'"),
    ({"leak_check_every": 0}, "leak_check_every", "must be an int >= 1, got 0"),
    ({"leak_check_every": True}, "leak_check_every", "got True"),
    ({"leak_every": 5}, "MemoryProbeCallback.configure", "did you mean 'leak_check_every'?"),
    ({"leak_confirmations": 0}, "leak_confirmations", "must be an int >= 1, got 0"),
    ({"leak_options": 3}, "leak_options", "must be a mapping, got 3"),
    ({"diagnose": "yes"}, "diagnose", "must be a bool, got 'yes'"),
    ({"diagnose": True, "probes": ["gc"]}, "diagnose", "give either diagnose=True or probes="),
    ({"site_keys": 1}, "site_keys", "must be a bool, got 1"),
    ({"jsonl": 3}, "jsonl", "must be a path, True or None, got 3"),
    ({"probes": ["proces"]}, "probes", "did you mean 'process'?"),
    ({"probes": 42}, "probes", "must be a list of names or a mapping"),
    ({"probes": {"process": 3}}, "probes.process", "options must be a mapping, got 3"),
    ({"probes": {"gc": {"every": 0}}}, "probes.gc.every", "must be an int >= 1"),
    ({"probes": {"gc": {"isolate": True}}}, "probes.gc.isolate", "needs a time limit"),
    ({"probes": {"tracemalloc": {"window_steps": 5}}}, "tracemalloc.window_steps",
     "go together"),
    ({"every": 0}, "every", "must be an int >= 1"),
    ({"interval_seconds": -1}, "interval_seconds", "must be a number of seconds >= 0"),
    ({"budget": 2}, "budget", "must be a fraction in (0, 1]"),
    ({"history": 0}, "history", "must be an int >= 1"),
    ({"max_failures": 0}, "max_failures", "must be an int >= 1"),
    ({"max_site_keys": -1}, "max_site_keys", "must be an int >= 0"),
    ({"time_limit_seconds": 0}, "time_limit_seconds", "must be"),
    ({"time_limit_seconds": "1s"}, "time_limit_seconds", "got '1s'"),
    ({"time_limt_seconds": 1}, "MemoryProbeCallback.configure",
     "unknown option 'time_limt_seconds' (did you mean 'time_limit_seconds'?)"),
]


@pytest.mark.parametrize(("options", "option", "fragment"), CALLBACK_CASES,
                         ids=[_id(c) for c in CALLBACK_CASES])
def test_callback_configure_rejects_bad_options(options: dict[str, Any], option: str,
                                                fragment: str) -> None:
    rllib = pytest.importorskip("memprobe_rllib")
    with pytest.raises(memprobe.ConfigError) as info:
        rllib.MemoryProbeCallback.configure(**options)
    assert info.value.option == option
    assert fragment in info.value.message, info.value.message


def test_callback_configure_accepts_good_options_and_keeps_them() -> None:
    rllib = pytest.importorskip("memprobe_rllib")
    cls = rllib.MemoryProbeCallback.configure(
        probes={"process": {}, "gc": {"every": 2, "time_limit_seconds": 1, "isolate": True}},
        trigger="sample", budget=0.05, leak_check_every=10,
    )
    opts = cls.options
    assert isinstance(opts, rllib.CallbackOptions)
    assert opts.probes["gc"] == {"every": 2, "time_limit_seconds": 1, "isolate": True}
    assert (opts.trigger, opts.budget, opts.leak_check_every) == ("sample", 0.05, 10)
    assert rllib.MemoryProbeCallback.options == rllib.CallbackOptions()  # the base is untouched
    # a configured class is configured again from its own options
    with pytest.raises(memprobe.ConfigError, match="did you mean 'budget'"):
        cls.configure(budgte=0.1)


def test_callback_time_limit_applies_to_every_probe_unless_a_probe_sets_its_own() -> None:
    rllib = pytest.importorskip("memprobe_rllib")
    cls = rllib.MemoryProbeCallback.configure(
        probes={"process": {}, "gc": {"time_limit_seconds": 2.5}}, time_limit_seconds=0.5,
    )
    from memprobe_rllib._process import ProcessProber

    prober = ProcessProber(cls.options, "env_runner", 1, prefix="memprobe", step_name="",
                           sink=False).prober
    assert {s.name: s.time_limit for s in prober._probes} == {"process": 0.5, "gc": 2.5}


HUGE = 10**5000  # over Python's 4,300-digit limit for printing an int


@pytest.mark.parametrize("options", [
    {"every": HUGE}, {"history": -HUGE}, {"budget": HUGE}, {"leak_check_every": HUGE},
    {"interval_seconds": HUGE}, {"probes": {"process": {"every": HUGE}}},
    {"probes": [HUGE]}, {"probes": {"tracemalloc": {"nframe": HUGE}}},
], ids=lambda o: next(iter(o)))
def test_an_int_too_large_to_print_still_gives_a_config_error(options: dict[str, Any]) -> None:
    """Building the message must not fail: ``repr`` of such an int raises ValueError."""
    with pytest.raises(memprobe.ConfigError) as info:
        memprobe.Prober(load_entrypoints=False, **options)
    assert "<int of 16610 bits>" in str(info.value) or "too large" in str(info.value)
