"""The ``example`` probe (live modules, a real and cheap metric) and the ``example_csv`` sink."""

from __future__ import annotations

import os
import sys
from typing import Any

import memprobe
import memprobe.hookspecs
from memprobe.metrics import Metric


class ExampleProbe:
    """Counts the modules imported in this process and how many samples it has taken."""

    metrics = {
        "modules_count": Metric("entries in sys.modules", "count"),
        "samples_count": Metric("samples this probe has taken", "count", "counter"),
    }

    def __init__(self, *, scale: int = 1) -> None:
        if not isinstance(scale, int) or scale < 1:
            raise memprobe.ConfigError("example.scale", f"must be an int >= 1, got {scale!r}")
        self.scale = scale
        self._n = 0

    def start(self) -> None:
        self._n = 0

    def sample(self) -> dict[str, Any]:
        self._n += 1
        return {"modules_count": len(sys.modules) * self.scale, "samples_count": self._n}

    def stop(self) -> None:
        pass


class CsvSink:
    """Appends ``time,step,key,value`` rows for the keys it is given (all if none)."""

    def __init__(self, *, path: str, keys: list[str] | None = None) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise memprobe.ConfigError("sinks.example_csv.path", f"must be a path, got {path!r}")
        self.path = os.fspath(path)
        self.keys = None if keys is None else list(keys)
        self._f: Any = None

    def write(self, sample: memprobe.Sample) -> None:
        if self._f is None:
            self._f = open(self.path, "a", encoding="utf-8")
        for k, v in sample.values.items():
            if self.keys is None or k in self.keys:
                self._f.write(f"{sample.time_seconds},{sample.step},{k},{v}\n")

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


@memprobe.hookimpl
def memprobe_register_probes(register: Any) -> None:
    register("example", ExampleProbe)


# Defined only where memprobe has the sink hook: an older memprobe would refuse the
# whole plugin for a hook it does not know.
if hasattr(memprobe.hookspecs, "memprobe_register_sinks"):

    @memprobe.hookimpl
    def memprobe_register_sinks(register: Any) -> None:
        register("example_csv", CsvSink)
