"""memprobe's pytest plugin: ``@pytest.mark.memprobe_leak_check`` loops a test and judges it.

::

    @pytest.mark.memprobe_leak_check(repeats=30, max_growth_bytes=64_000, warmup=3)
    def test_no_leak():
        handle_request()

The test body runs ``repeats`` times (function-scoped fixtures are set up
once and shared by the repeats); after each run the garbage is collected and
the process and tracemalloc probes sample. The test fails with
:class:`memprobe.LeakError`, naming the metrics that grew and the suspect
allocation sites, when memory keeps growing by more than ``max_growth_bytes``
over the repeats. Loaded through the ``pytest11`` entry point ``memprobe``.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

MARKER = "memprobe_leak_check"
_OPTIONS = ("repeats", "max_growth_bytes", "warmup", "metrics", "probes")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(repeats=50, max_growth_bytes=100000, warmup=5, metrics=..., probes=...): "
        "run the test body repeatedly and fail when memory keeps growing (memprobe)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    marker = pyfuncitem.get_closest_marker(MARKER)
    if marker is None:
        return None
    from .leaks import assert_no_leak

    if marker.args:
        raise pytest.UsageError(f"{MARKER} takes keyword arguments only ({', '.join(_OPTIONS)})")
    unknown = sorted(set(marker.kwargs) - set(_OPTIONS))
    if unknown:
        raise pytest.UsageError(
            f"{MARKER}: unknown option(s) {unknown}; known: {', '.join(_OPTIONS)}"
        )
    fn = pyfuncitem.obj
    if inspect.iscoroutinefunction(fn):
        raise pytest.UsageError(f"{MARKER} does not support async tests ({pyfuncitem.nodeid})")
    argnames = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in argnames}
    opts: dict[str, Any] = dict(marker.kwargs)
    if isinstance(opts.get("metrics"), list):
        opts["metrics"] = tuple(opts["metrics"])
    __tracebackhide__ = True
    assert_no_leak(lambda: fn(**kwargs), **opts)
    return True
