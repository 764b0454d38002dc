"""The leak alarm: judge a history every N samples, alarm once per metric after K checks."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Union

from ._errors import ConfigError, LeakWarning, show
from ._options import check_int, hint

if TYPE_CHECKING:  # imported at the first check: the statistics are not needed before
    from ._verdicts import Report, Verdict

#: What to do on a leak: ``"warn"`` (a :class:`memprobe.LeakWarning`), or a callable
#: given each newly leaking :class:`memprobe.Verdict`.
OnLeak = Union[Callable[["Verdict"], Any], Literal["warn"]]


def check_leak_options(options: Any) -> dict[str, Any]:
    """``leak_options=``: options of :func:`memprobe.analyze_samples` (:data:`LEAK_OPTIONS`)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigError("leak_options", f"must be a mapping, got {show(options)}")
    from ._verdicts import LEAK_OPTIONS

    known = sorted(LEAK_OPTIONS)
    for k in options:
        if k not in LEAK_OPTIONS:
            raise ConfigError(f"leak_options.{k}", f"unknown option{hint(str(k), known)} "
                              f"(options: {', '.join(known)})")
    return dict(options)


class LeakAlarm:
    """Judges a sample history every ``check_every`` samples and alarms on lasting leaks.

    A metric alarms when it is judged leaking at ``confirmations`` checks in a
    row (a transient, such as an allocator step after a plateau, rarely lasts
    two checks: docs/leaks.md has the false-alarm rates), and only once.

    The owner (a :class:`memprobe.Prober`, the RLlib adapter) calls :meth:`tick`
    after each sample and, when it returns True, :meth:`check` with a fresh
    :class:`memprobe.Report` made with :attr:`options`.

    :param on_leak: ``"warn"`` or a callable given each newly leaking Verdict.
    :param check_every: judge every this many samples.
    :param confirmations: checks in a row a metric must leak at before it alarms.
    :param options: options of :func:`memprobe.analyze_samples` for each check.

    :ivar latest: the Report of the latest check (None before the first).
    :ivar alarmed: the keys that have alarmed.
    """

    def __init__(
        self,
        on_leak: OnLeak,
        *,
        check_every: int = 50,
        confirmations: int = 2,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        if on_leak != "warn" and not callable(on_leak):
            raise ConfigError("on_leak", f"must be a callable or 'warn', got {show(on_leak)}")
        self.on_leak = on_leak
        self.check_every = check_int("leak_check_every", check_every, 1)
        self.confirmations = check_int("leak_confirmations", confirmations, 1)
        self.options = check_leak_options(options)
        self.latest: Report | None = None
        self.alarmed: set[str] = set()
        self._streak: dict[str, int] = {}
        self._samples = 0

    def tick(self) -> bool:
        """Count one sample; True when a check is due."""
        self._samples += 1
        return self._samples % self.check_every == 0

    def check(self, report: Report) -> list[Verdict]:
        """Take the verdicts of a check; alarm for each metric newly confirmed leaking.

        :returns: the verdicts that alarmed at this check.
        """
        self.latest = report
        leaking = report.leaking
        streak = self._streak
        self._streak = {v.key: streak.get(v.key, 0) + 1 for v in leaking}
        fired = []
        for v in leaking:
            if v.key in self.alarmed or self._streak[v.key] < self.confirmations:
                continue
            self.alarmed.add(v.key)
            fired.append(v)
            if callable(self.on_leak):
                self.on_leak(v)
            else:
                warnings.warn(f"memprobe: leak: {v.describe()}", LeakWarning, stacklevel=5)
        return fired

    def reset(self) -> None:
        """Forget every check (a forked child judges its own samples only)."""
        self.latest = None
        self.alarmed.clear()
        self._streak.clear()
        self._samples = 0
