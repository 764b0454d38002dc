"""memprobe: pluggable memory probes for Python loops.

```pycon
>>> import memprobe
>>> with memprobe.Prober(probes=["process", "gc"]) as prober:
...     values = prober.sample(step=0)
>>> "memprobe/process/rss_bytes" in values
True

```
"""

from typing import TYPE_CHECKING, Any

from ._errors import ConfigError
from ._errors import JsonlReadError
from ._errors import KeyCollisionError
from ._errors import LeakError
from ._errors import LeakWarning
from ._errors import MemprobeError
from ._errors import MemprobeWarning
from ._errors import MetricValueError
from ._errors import PluginWarning
from ._errors import ProbeError
from ._errors import ProbeFailedWarning

if TYPE_CHECKING:
    from ._flatten import SiteKeyCap
    from ._flatten import SiteMap
    from ._flatten import flatten
    from ._format import format_value
    from ._registry import describe_key
    from .leak._alarm import LeakAlarm
    from .engine._history import History
    from .leak._oom import Headroom
    from .leak._oom import oom_headroom
    from .leak._tiers import Tiers
    from .engine._options import DEFAULT_PROBES
    from .engine._phases import Mark
    from .report._phase_growth import PhaseGrowth
    from .report._phase_growth import phase_growth
    from .engine._options import parse_probes
    from ._plugins import ProbeInfo
    from ._plugins import SinkInfo
    from ._plugins import get_plugin_manager
    from .engine._prober import Prober
    from ._sample import Number
    from ._sample import Sample
    from .engine._sinks import JsonlSink
    from .engine._sinks import Sink
    from .engine._watch import watch
    from .hookspecs import hookimpl
    from .hookspecs import hookspec
    from .keys import make_key
    from .keys import sanitize_key
    from .keys import shorten_path
    from .keys import split_key
    from .metrics import Metric
    from .report._jsonl import JsonlRecord
    from .report._jsonl import iter_records
    from .report._jsonl import read_samples
    from .leak._kinds import KINDS
    from .leak._verdicts import LEAK_OPTIONS
    from .leak._verdicts import Report
    from .leak._verdicts import Verdict
    from .leak._verdicts import analyze
    from .leak._verdicts import analyze_samples
    from .leaks import assert_no_leak
    from .leaks import check_leaks
    from ._own import register_own

from ._version import __version__ as __version__

# Imported when first used, so that ``import memprobe`` costs only the errors: the
# Prober, the probes' registry, the verdicts and their statistics load on first use.
_LAZY = {
    "SiteKeyCap": "._flatten",
    "SiteMap": "._flatten",
    "flatten": "._flatten",
    "format_value": "._format",
    "describe_key": "._registry",
    "LeakAlarm": ".leak._alarm",
    "History": ".engine._history",
    "Headroom": ".leak._oom",
    "oom_headroom": ".leak._oom",
    "Tiers": ".leak._tiers",
    "DEFAULT_PROBES": ".engine._options",
    "Mark": ".engine._phases",
    "PhaseGrowth": ".report._phase_growth",
    "phase_growth": ".report._phase_growth",
    "parse_probes": ".engine._options",
    "ProbeInfo": "._plugins",
    "SinkInfo": "._plugins",
    "get_plugin_manager": "._plugins",
    "Prober": ".engine._prober",
    "Number": "._sample",
    "Sample": "._sample",
    "JsonlSink": ".engine._sinks",
    "Sink": ".engine._sinks",
    "watch": ".engine._watch",
    "hookimpl": ".hookspecs",
    "hookspec": ".hookspecs",
    "make_key": ".keys",
    "sanitize_key": ".keys",
    "shorten_path": ".keys",
    "split_key": ".keys",
    "Metric": ".metrics",
    "JsonlRecord": ".report._jsonl",
    "iter_records": ".report._jsonl",
    "read_samples": ".report._jsonl",
    "KINDS": ".leak._kinds",
    "LEAK_OPTIONS": ".leak._verdicts",
    "Report": ".leak._verdicts",
    "Verdict": ".leak._verdicts",
    "analyze": ".leak._verdicts",
    "analyze_samples": ".leak._verdicts",
    "assert_no_leak": ".leaks",
    "check_leaks": ".leaks",
    "register_own": "._own",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memprobe' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

# Public exceptions and warnings show as ``memprobe.LeakError``, where users catch them.
for _cls in (
    ConfigError,
    KeyCollisionError,
    LeakError,
    LeakWarning,
    MemprobeError,
    MemprobeWarning,
    MetricValueError,
    PluginWarning,
    ProbeError,
    ProbeFailedWarning,
    JsonlReadError,
):
    _cls.__module__ = "memprobe"
del _cls

__all__ = [
    "DEFAULT_PROBES",
    "KINDS",
    "LEAK_OPTIONS",
    "ConfigError",
    "Headroom",
    "History",
    "JsonlReadError",
    "JsonlRecord",
    "JsonlSink",
    "KeyCollisionError",
    "LeakAlarm",
    "LeakError",
    "LeakWarning",
    "Mark",
    "MemprobeError",
    "MemprobeWarning",
    "Metric",
    "MetricValueError",
    "Number",
    "PhaseGrowth",
    "PluginWarning",
    "ProbeError",
    "ProbeFailedWarning",
    "ProbeInfo",
    "Prober",
    "Report",
    "Sample",
    "Sink",
    "SinkInfo",
    "SiteKeyCap",
    "SiteMap",
    "Tiers",
    "Verdict",
    "analyze",
    "analyze_samples",
    "assert_no_leak",
    "check_leaks",
    "describe_key",
    "flatten",
    "format_value",
    "get_plugin_manager",
    "hookimpl",
    "hookspec",
    "iter_records",
    "make_key",
    "oom_headroom",
    "parse_probes",
    "phase_growth",
    "read_samples",
    "register_own",
    "sanitize_key",
    "shorten_path",
    "split_key",
    "watch",
]
