"""memprobe's pytest plugin: loop a test body and judge its memory, bound a test's peak,
sum up the session.

::

    @pytest.mark.memprobe_leak_check(repeats=30, max_growth_bytes="64 KB", warmup=3)
    def test_no_leak():
        handle_request()

    @pytest.mark.memprobe_limit_peak("24 MB")
    def test_fits():
        load_batch()

A leak check runs the body ``repeats`` times (function-scoped fixtures are set
up once and shared by the repeats; a ``unittest.TestCase`` method runs between
one ``setUp`` and one ``tearDown``); after each run the garbage is collected
and the process and tracemalloc probes sample. The test fails with
:class:`memprobe.LeakError` when memory keeps growing by more than
``max_growth_bytes`` over the repeats, naming the metric, the culprit lines and
what they grew. A peak limit fails a test whose traced Python memory rose more
than the limit above its start at any moment, listing the sites that held it.

Without editing tests (command line, else the ini file):

- ``--memprobe-leaks=N``: judge every selected test, its body run N times;
- ``--memprobe-max-growth=SIZE`` / ``memprobe_max_growth_bytes``: the tolerance;
- ``--memprobe-frames=N`` / ``memprobe_frames``: frames traced per allocation (16);
- ``--memprobe-top=N`` / ``memprobe_top``: sites listed per failing test (10);
- ``--memprobe-native`` / ``memprobe_native``: a failing leak check also lists the
  native (C) sites, from a memray window (needs ``pymemprobe[native]``);
- ``--memprobe-allow=PATTERN`` (repeatable) / ``memprobe_allow`` (one per line):
  culprits (``file:line`` or type patterns, fnmatch) reported but not failing;
- ``--memprobe-off``: judge nothing; the markers stay registered.

Sizes are ``"64 KB"``, ``"1.5 MiB"`` or bytes (KB = KiB = 1024). Async tests
and async ``TestCase`` methods cannot be looped: marked, they are a usage error
naming the test; under ``--memprobe-leaks`` the summary lists them as not judged.
The session summary repeats each failure's headline, also under pytest-xdist.
Loaded through the ``pytest11`` entry point ``memprobe``. docs/pytest.md has the
table of pytest-memray's options and memprobe's equivalents.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Generator
from typing import Any

import pytest

from ._options import (
    DEFAULT_MAX_GROWTH_BYTES,
    LEAK_MARKER,
    PEAK_MARKER,
    Judged,
    Settings,
    leak_options,
    peak_limit,
    settings,
    with_warmup,
)

MARKER = LEAK_MARKER
_PROPERTY = "memprobe"
_SETTINGS = pytest.StashKey[Settings]()
__all__ = ["DEFAULT_MAX_GROWTH_BYTES", "MARKER", "PEAK_MARKER"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("memprobe", "memory checks (memprobe)")
    add = group.addoption
    add("--memprobe-leaks", type=int, default=None, metavar="N",
        help="run every selected test body N times (fixtures set up once) and fail the "
        "tests whose memory keeps growing")
    add("--memprobe-max-growth", default=None, metavar="SIZE",
        help="growth a judged test may show: bytes or '64 KB', '1.5 MiB' "
        "(default: ini memprobe_max_growth_bytes, else 100000)")
    add("--memprobe-frames", default=None, metavar="N",
        help="frames traced per allocation (default: ini memprobe_frames, else 16)")
    add("--memprobe-top", default=None, metavar="N",
        help="allocation sites listed per failing test (default: ini memprobe_top, else 10)")
    add("--memprobe-native", action="store_true", default=False,
        help="a failing leak check also lists native (C) sites from memray "
        "(needs pymemprobe[native])")
    add("--memprobe-allow", action="append", default=None, metavar="PATTERN",
        help="a culprit (file:line or type, fnmatch pattern) reported but not failing; "
        "repeatable")
    add("--memprobe-off", action="store_true", default=False,
        help="judge nothing (the markers stay registered)")
    parser.addini("memprobe_max_growth_bytes", type="string",
                  default=str(DEFAULT_MAX_GROWTH_BYTES),
                  help="memprobe: growth a judged test may show, bytes or '64 KB' (100000)")
    parser.addini("memprobe_frames", type="string", default="16",
                  help="memprobe: frames traced per allocation (16)")
    parser.addini("memprobe_top", type="string", default="10",
                  help="memprobe: allocation sites listed per failing test (10)")
    parser.addini("memprobe_native", type="string", default="false",
                  help="memprobe: list native sites of failing leak checks (needs memray)")
    parser.addini("memprobe_allow", type="linelist", default=[],
                  help="memprobe: culprit patterns (file:line or type) that do not fail")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{LEAK_MARKER}(repeats=50, max_growth_bytes=100000, warmup=5, metrics=..., "
        "probes=...): run the test body repeatedly and fail when memory keeps growing "
        "(memprobe)")
    config.addinivalue_line(
        "markers",
        f'{PEAK_MARKER}("24 MB"): fail when the traced Python memory rises more than the '
        "limit above the test's start (memprobe)")
    from .._errors import ConfigError

    try:
        s = settings(config.getoption, config.getini)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    if s.native and not s.off:
        try:
            import memray  # noqa: F401
        except ImportError:
            raise pytest.UsageError(
                "--memprobe-native: memray is not installed: pip install 'pymemprobe[native]'"
            ) from None
    config.stash[_SETTINGS] = s
    config.pluginmanager.register(_SessionSummary(), "memprobe-session-summary")


def _settings(config: pytest.Config) -> Settings:
    return config.stash.get(_SETTINGS, Settings())


def _is_async(item: pytest.Item) -> bool:
    fn = getattr(item, "obj", None)
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


def _refusal(item: pytest.Item) -> str:
    """Why ``item`` cannot be judged, or ``""``."""
    if _is_async(item):
        return ("an async test cannot be looped by memprobe (its event loop belongs to the "
                "async plugin); call memprobe.assert_no_leak on the code under test instead")
    return ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check every marker's options before any test runs: a fault is a usage error."""
    from .._errors import ConfigError

    if _settings(config).off:
        return
    for item in items:
        for marker_name, check in ((LEAK_MARKER, _leak_opts), (PEAK_MARKER, _peak)):
            marker = item.get_closest_marker(marker_name)
            if marker is None:
                continue
            try:
                check(item)
            except ConfigError as exc:
                msg = str(exc)
                msg = msg if msg.startswith(marker_name) else f"{marker_name}: {msg}"
                raise pytest.UsageError(f"{item.nodeid}: {msg}") from None
            why = _refusal(item)
            if why:
                raise pytest.UsageError(f"{item.nodeid}: {marker_name}: {why}")


def _leak_opts(item: pytest.Item) -> dict[str, Any] | None:
    """The options of ``item``'s leak check, or None when it is not judged."""
    s = _settings(item.config)
    marker = item.get_closest_marker(LEAK_MARKER)
    if s.off or (marker is None and s.leaks is None):
        return None
    opts: dict[str, Any] = {"max_growth_bytes": s.max_growth_bytes,
                            "tracemalloc_top": max(20, s.top)}
    if s.leaks is not None:
        opts["repeats"] = s.leaks
    if marker is not None:
        opts.update(leak_options(marker.kwargs, marker.args))
    return with_warmup(opts)


def _peak(item: pytest.Item) -> int | None:
    marker = item.get_closest_marker(PEAK_MARKER)
    if marker is None or _settings(item.config).off:
        return None
    return peak_limit(marker.kwargs, marker.args)


def _record(item: pytest.Item, judged: Judged) -> None:
    item.user_properties.append((_PROPERTY, json.dumps(dataclasses.asdict(judged))))


def _judge(item: pytest.Item, body: Callable[[], Any]) -> bool:
    """Run ``body`` under the checks ``item`` asks for; False when it asks for none."""
    opts, limit = _leak_opts(item), _peak(item)
    if opts is None and limit is None:
        return False
    why = _refusal(item)
    if why:  # only --memprobe-leaks gets here: a marked one was refused at collection
        _record(item, Judged(item.nodeid, False, refused=why))
        return False
    from ._report import run_checks

    __tracebackhide__ = True
    run_checks(item.nodeid, body, opts, limit, _settings(item.config),
               lambda j: _record(item, j))
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    __tracebackhide__ = True
    fn = pyfuncitem.obj
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    return True if _judge(pyfuncitem, lambda: fn(**kwargs)) else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A ``unittest.TestCase`` method: looped between one setUp and one tearDown, by
    giving unittest a method that runs the checks (pytest calls ``item.obj``)."""
    original = getattr(item, "obj", None)
    if type(item).__name__ != "TestCaseFunction" or original is None or (
            _leak_opts(item) is None and _peak(item) is None):
        yield
        return

    def judged(*args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        _judge(item, lambda: original(*args, **kwargs))

    item.obj = judged  # type: ignore[attr-defined]
    try:
        yield
    finally:
        item.obj = original  # type: ignore[attr-defined]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[
        None, Any, None]:
    outcome = yield
    rep = outcome.get_result()
    if call.when != "call" or call.excinfo is None:
        return
    from .._errors import ConfigError, LeakError
    from ._report import PeakError

    exc = call.excinfo.value
    path, lineno, _ = item.location
    where = f"{path}:{(lineno or 0) + 1}: {item.name}"
    judged = _leak_opts(item) is not None or _peak(item) is not None
    if isinstance(exc, (LeakError, PeakError)) and judged:
        # The verdict is the failure: memprobe's frames would only hide it.
        name = "LeakError" if isinstance(exc, LeakError) else "PeakError"
        rep.longrepr = f"memprobe.{name}: {exc}\n\n{where} judged by memprobe"
    elif isinstance(exc, ConfigError) and judged and _came_from_memprobe(call.excinfo.traceback):
        rep.longrepr = f"memprobe.ConfigError: {LEAK_MARKER}: {exc}\n\n{where}"


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
        from ._report import summary_lines

        terminalreporter.section("memprobe")
        for line in summary_lines(self.results):
            terminalreporter.write_line(line)
