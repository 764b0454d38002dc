"""``memprobe.watch``: sample after each item of an iterable."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from .._checks import hint
from .._errors import ConfigError
from ._options import ProbesOption
from ._prober import Prober

T = TypeVar("T")


class Watch(Iterable[T]):
    """Iterates over ``iterable`` and samples after each item: ``memprobe.watch``."""

    def __init__(self, iterable: Iterable[T], prober: Prober) -> None:
        self._iterable = iterable
        self.prober = prober

    def __iter__(self) -> Iterator[T]:
        with self.prober:
            for i, item in enumerate(self._iterable):
                yield item
                self.prober.sample(step=i)


def watch(
    iterable: Iterable[T],
    probes: ProbesOption = None,
    *,
    every: int = 1,
    **options: Any,
) -> Watch[T]:
    """Wrap an iterable so probes sample after every ``every`` items.

    ``for batch in memprobe.watch(loader, probes=["process"], every=10): ...``;
    the Prober is ``.prober`` of the returned object (its ``history`` holds
    the samples). Other keyword options go to :class:`Prober`.
    """
    import inspect

    known = [n for n in inspect.signature(Prober).parameters if n != "probes"]
    for name in options:
        if name not in known:
            raise ConfigError(name, f"unknown option of memprobe.watch{hint(name, known)}")
    return Watch(iterable, Prober(probes, every=every, **options))
