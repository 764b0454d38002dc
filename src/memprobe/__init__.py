"""memprobe: pluggable memory probes for Python loops.

>>> import memprobe
>>> with memprobe.Prober(probes=["process", "gc"]) as prober:
...     values = prober.sample(step=0)
>>> "memprobe/process/rss_bytes" in values
True
"""

from ._errors import ConfigError
from ._errors import KeyCollisionError
from ._errors import LeakError
from ._errors import LeakWarning
from ._errors import MemprobeError
from ._errors import MemprobeWarning
from ._errors import MetricValueError
from ._errors import PluginWarning
from ._errors import ProbeError
from ._errors import ProbeFailedWarning
from ._flatten import SiteMap
from ._flatten import flatten
from ._flatten import sanitize_key
from ._flatten import shorten_path
from ._plugins import ProbeInfo
from ._plugins import get_plugin_manager
from ._prober import DEFAULT_PROBES
from ._prober import Prober
from ._prober import Sample
from ._prober import watch
from ._sinks import JsonlSink
from ._sinks import Sink
from .hookspecs import hookimpl
from .hookspecs import hookspec
from ._kinds import KINDS
from ._verdicts import LEAK_OPTIONS
from ._verdicts import Report
from ._verdicts import Verdict
from ._verdicts import analyze
from ._verdicts import analyze_samples
from .leaks import assert_no_leak
from .leaks import check_leaks

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_PROBES",
    "ConfigError",
    "JsonlSink",
    "KINDS",
    "KeyCollisionError",
    "LEAK_OPTIONS",
    "LeakError",
    "LeakWarning",
    "MemprobeError",
    "MemprobeWarning",
    "MetricValueError",
    "PluginWarning",
    "ProbeError",
    "ProbeFailedWarning",
    "ProbeInfo",
    "Prober",
    "Report",
    "Sample",
    "Sink",
    "SiteMap",
    "Verdict",
    "analyze",
    "analyze_samples",
    "assert_no_leak",
    "check_leaks",
    "flatten",
    "get_plugin_manager",
    "hookimpl",
    "hookspec",
    "sanitize_key",
    "shorten_path",
    "watch",
]
