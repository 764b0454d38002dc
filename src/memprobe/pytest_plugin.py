"""memprobe's pytest plugin: loop a test body, judge its memory, sum up the session.

::

    @pytest.mark.memprobe_leak_check(repeats=30, max_growth_bytes=64_000, warmup=3)
    def test_no_leak():
        handle_request()

The test body runs ``repeats`` times (function-scoped fixtures are set up
once and shared by the repeats); after each run the garbage is collected and
the process and tracemalloc probes sample. The test fails with
:class:`memprobe.LeakError`, naming the metrics that grew and the suspect
allocation sites, when memory keeps growing by more than ``max_growth_bytes``
over the repeats. The failure shows the verdict, not memprobe's own frames.

Without editing tests:

- ``pytest --memprobe-leaks=N`` loops every selected test body (``-k``,
  ``-m`` select as usual) ``N`` times and judges it; a marker's options win.
- ``memprobe_max_growth_bytes`` in the ini file (``pytest.ini``,
  ``[tool.pytest.ini_options]``) is the suite's default tolerance; a marker's
  ``max_growth_bytes`` overrides it for one test.

At the end of the session a summary lists the tests judged, the worst growth
and the failures with their culprit line, also under pytest-xdist (``-n``),
where each worker's verdicts travel to the controller with the test reports.
A misspelt marker option is a usage error at collection, with a suggestion.
Loaded through the ``pytest11`` entry point ``memprobe``.
"""

from __future__ import annotations

import difflib
import inspect
import json
from collections.abc import Generator
from typing import Any

import pytest

MARKER = "memprobe_leak_check"
_OPTIONS = ("repeats", "max_growth_bytes", "warmup", "metrics", "probes")
_INI_GROWTH = "memprobe_max_growth_bytes"
_PROPERTY = "memprobe"
#: Default tolerance when neither the marker nor the ini file gives one.
DEFAULT_MAX_GROWTH_BYTES = 100_000


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("memprobe", "memory leak checks (memprobe)")
    group.addoption(
        "--memprobe-leaks", type=int, default=None, metavar="N",
        help="run every selected test body N times (fixtures set up once) and fail the "
        "tests whose memory keeps growing",
    )
    parser.addini(_INI_GROWTH, type="string", default=str(DEFAULT_MAX_GROWTH_BYTES),
                  help="memprobe: growth in bytes a judged test may show (default 100000)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(repeats=50, max_growth_bytes=100000, warmup=5, metrics=..., probes=...): "
        "run the test body repeatedly and fail when memory keeps growing (memprobe)",
    )
    config.pluginmanager.register(_SessionSummary(), "memprobe-session-summary")
    n = config.getoption("--memprobe-leaks")
    if n is not None and n < 3:
        raise pytest.UsageError(f"--memprobe-leaks: must be an int >= 3, got {n}")
    _ini_growth(config)


def _ini_growth(config: pytest.Config) -> float:
    text = str(config.getini(_INI_GROWTH)).strip()
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise pytest.UsageError(f"{_INI_GROWTH}: must be a number of bytes >= 0, got {text!r}")
    return int(value) if value.is_integer() else value


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check every marker's options before any test runs: a typo is a usage error."""
    for item in items:
        marker = item.get_closest_marker(MARKER)
        if marker is None:
            continue
        where = item.nodeid
        if marker.args:
            raise pytest.UsageError(
                f"{where}: {MARKER} takes keyword arguments only ({', '.join(_OPTIONS)})")
        for name in marker.kwargs:
            if name not in _OPTIONS:
                close = difflib.get_close_matches(name, _OPTIONS, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise pytest.UsageError(
                    f"{where}: {MARKER}: unknown option {name!r}; {hint}"
                    f"known: {', '.join(_OPTIONS)}")
        if inspect.iscoroutinefunction(getattr(item, "obj", None)):
            raise pytest.UsageError(f"{where}: {MARKER} does not support async tests")


def _options(item: pytest.Function) -> dict[str, Any] | None:
    """The options for judging ``item``, or None when it is not judged."""
    marker = item.get_closest_marker(MARKER)
    n = item.config.getoption("--memprobe-leaks")
    if marker is None and n is None:
        return None
    if marker is None and inspect.iscoroutinefunction(item.obj):
        return None  # --memprobe-leaks judges what it can loop
    opts: dict[str, Any] = {"max_growth_bytes": _ini_growth(item.config)}
    if n is not None:
        opts["repeats"] = n
    if marker is not None:
        opts.update(marker.kwargs)
    if isinstance(opts.get("metrics"), list):
        opts["metrics"] = tuple(opts["metrics"])
    return opts


def _summary(nodeid: str, report: Any, failed: bool) -> dict[str, Any]:
    """What the session summary needs from one judged test (JSON, for xdist)."""
    from .keys import DEFAULT_PREFIX, short_key, site_name, split_key

    growth, metric, culprit = 0.0, "", ""
    for v in getattr(report, "verdicts", {}).values():
        if v.key.endswith("_bytes") and v.growth > growth:
            growth, metric = float(v.growth), short_key(v.key, DEFAULT_PREFIX)
        if v.status == "leak" and v.culprits and not culprit:
            culprit = v.culprits[0]
    if not culprit:
        for v in (*getattr(report, "sites", ()), *getattr(report, "types", ())):
            if v.status == "leak":
                try:
                    culprit = site_name(split_key(v.key, DEFAULT_PREFIX).metric) or v.key
                except ValueError:
                    culprit = v.key
                break
    return {"nodeid": nodeid, "failed": failed, "growth_bytes": growth,
            "metric": metric, "culprit": culprit}


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    opts = _options(pyfuncitem)
    if opts is None:
        return None
    from . import LeakError, assert_no_leak

    __tracebackhide__ = True
    fn = pyfuncitem.obj
    argnames = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in argnames}
    try:
        report = assert_no_leak(lambda: fn(**kwargs), **opts)
    except LeakError as exc:
        result = _summary(pyfuncitem.nodeid, exc.report, True)
        pyfuncitem.user_properties.append((_PROPERTY, json.dumps(result)))
        raise
    pyfuncitem.user_properties.append(
        (_PROPERTY, json.dumps(_summary(pyfuncitem.nodeid, report, False))))
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[
        None, Any, None]:
    outcome = yield
    rep = outcome.get_result()
    if call.when != "call" or call.excinfo is None:
        return
    from . import ConfigError, LeakError

    exc = call.excinfo.value
    path, lineno, _ = item.location
    where = f"{path}:{(lineno or 0) + 1}: {item.name}"
    if isinstance(exc, LeakError):
        # The verdict is the failure: memprobe's frames would only hide it.
        rep.longrepr = f"memprobe.LeakError: {exc}\n\n{where} judged by memprobe"
    elif isinstance(exc, ConfigError) and _came_from_memprobe(call.excinfo.traceback):
        rep.longrepr = f"memprobe.ConfigError: {MARKER}: {exc}\n\n{where}"


def _came_from_memprobe(tb: Any) -> bool:
    """The error was raised by memprobe's own option checks, not by the test body."""
    import os

    here = os.path.dirname(__file__)
    last = tb[-1] if len(tb) else None
    return last is not None and str(last.path).startswith(here)


class _SessionSummary:
    """Collects the verdicts from the test reports (also those of xdist workers)."""

    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == _PROPERTY:
                self.results.append(json.loads(str(value)))

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if hasattr(config, "workerinput") or not self.results:  # a worker: the controller sums
            return
        tr = terminalreporter
        tr.section("memprobe leak checks")
        failed = [r for r in self.results if r["failed"]]
        tr.write_line(f"{len(self.results)} test(s) judged, {len(failed)} leaking")
        worst = max(self.results, key=lambda r: r["growth_bytes"])
        if worst["growth_bytes"] > 0:
            tr.write_line(f"worst growth: {_bytes(worst['growth_bytes'])} of {worst['metric']} "
                          f"in {worst['nodeid']}")
        for r in failed:
            culprit = f", culprit {r['culprit']}" if r["culprit"] else ""
            tr.write_line(f"LEAK {r['nodeid']}: {_bytes(r['growth_bytes'])} of "
                          f"{r['metric']}{culprit}")


def _bytes(v: float) -> str:
    from ._format import fmt_value

    return fmt_value(v, "bytes")
