"""The ``example`` probe: live modules and the size of ``sys.modules`` — a real, cheap metric."""

from __future__ import annotations

import sys
from typing import Any

import memprobe


class ExampleProbe:
    """Counts the modules imported in this process and how many samples it has taken."""

    metrics = {
        "modules_count": "entries in sys.modules, count",
        "samples_count": "samples this probe has taken, count",
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


@memprobe.hookimpl
def memprobe_register_probes(register: Any) -> None:
    register("example", ExampleProbe)
