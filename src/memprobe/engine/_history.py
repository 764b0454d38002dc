"""A Prober's history: the last N samples in storage allocated up front.

A ring of Python objects (a ``deque`` of samples, each with its own dict of
boxed numbers) grows the process by about 600 bytes per sample until it is
full, which is exactly what a leak looks like to a verdict on ``rss_bytes``.
Here each sample is packed into one fixed-size row of a ``bytearray``
allocated (and touched) when the history is made, so memory does not grow as
the ring fills. The bytearray grows only when a sample has more keys than a
row holds, which happens in the first samples of a run.

Each row records its *layout*: the sample's keys in order, their types and
the ``struct`` format packing them (``q`` for an int, ``d`` for a float), so
values come back exactly, with their types. A sample that does not pack (an
int beyond 64 bits signed) is kept aside as a dict. Samples are rebuilt as
:class:`memprobe.Sample` objects when read.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, overload

from .._sample import Number, Sample

#: The longest history (its storage is allocated up front: 8 bytes per key per sample).
MAX_HISTORY = 10_000_000
_MIN_ROW_BYTES = 8 * 32
_ASIDE = -1  # the layout id of a row kept aside as a dict


class _Layout:
    """The keys of one kind of row, their types, and the struct that packs their values."""

    __slots__ = ("cache_key", "keys", "packer", "types")

    def __init__(self, keys: tuple[str, ...], types: tuple[type, ...], cache_key: Any) -> None:
        self.cache_key = cache_key
        self.keys = keys
        self.types = types
        self.packer = struct.Struct("=" + "".join("q" if t is int else "d" for t in types))


def make_sample(time_seconds: float, step: int | None, pid: int, values: Mapping[str, Number],
                _new: Any = object.__new__) -> Sample:
    """``Sample(...)`` without the frozen dataclass's ``__init__`` (half the cost)."""
    sample = _new(Sample)
    d = sample.__dict__
    d["time_seconds"] = time_seconds
    d["step"] = step
    d["pid"] = pid
    d["values"] = values
    return sample  # type: ignore[no-any-return]


class History(Sequence[Sample]):
    """The last ``maxlen`` samples, oldest first; a read-only sequence of :class:`Sample`.

    Each item is rebuilt when read: changing a sample read from here changes
    nothing stored.
    """

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self._times = array("d", [0.0]) * maxlen
        self._steps = array("q", [0]) * maxlen
        self._has_step = bytearray(maxlen)
        self._pids = array("q", [0]) * maxlen
        self._rows = array("i", [0]) * maxlen  # the layout of each row
        # Layouts in use, with how many rows use each: one no row uses is dropped, so
        # keys that change every sample (open-ended site keys) keep at most maxlen.
        self._layouts: list[_Layout | None] = []
        self._refs: list[int] = []
        self._free: list[int] = []
        self._layout_ids: dict[tuple[tuple[str, ...], tuple[type, ...]], int] = {}
        self._last: _Layout | None = None
        self._last_id = -1
        self._shape = -1
        self._row_bytes = _MIN_ROW_BYTES
        self._data = bytearray(maxlen * self._row_bytes)
        self._aside: dict[int, Any] = {}  # row -> values (or step, under -1 - row) kept aside
        self._start = 0
        self._len = 0

    # -- writing -----------------------------------------------------------
    def append(self, time_seconds: float, step: int | None, pid: int,
               values: Mapping[str, Number], shape: int = -1) -> None:
        """Store one sample (the oldest is dropped when full). ``values`` is copied.

        :param shape: ``-1``, or a number the caller guarantees to be the same only
            for values with the same keys, in the same order, of the same types: the
            same shape as the previous sample's skips comparing keys and types.
        """
        layout = self._last
        if shape < 0 or shape != self._shape or layout is None:
            vals = tuple(values.values())
            keys = tuple(values)
            types = tuple(map(type, vals))
            if layout is None or keys != layout.keys or types != layout.types:
                layout = self._layout(keys, types)
            self._shape = shape
        n = self._len
        maxlen = self.maxlen
        if n < maxlen:
            row = self._start + n
            if row >= maxlen:
                row -= maxlen
            self._len = n + 1
            overwritten = _ASIDE
        else:
            row = self._start
            self._start = row + 1 if row + 1 < maxlen else 0
            overwritten = self._rows[row]
        if self._aside:
            self._aside.pop(row, None)
            self._aside.pop(-1 - row, None)
        self._times[row] = time_seconds
        if step is None:
            self._has_step[row] = 0
        else:
            self._has_step[row] = 1
            try:
                self._steps[row] = step
            except (OverflowError, TypeError):  # beyond int64, or a float (a time)
                self._aside[-1 - row] = step
        self._pids[row] = pid
        new = self._last_id
        try:
            layout.packer.pack_into(self._data, row * self._row_bytes, *values.values())
        except struct.error:  # an int beyond int64: kept as it is
            self._aside[row] = dict(values)
            self._rows[row] = _ASIDE
            if not self._refs[new]:
                self._drop(new)
        else:
            if overwritten == new:  # a full ring of one layout: no count changes
                return
            self._rows[row] = new
            self._refs[new] += 1
        if overwritten != _ASIDE:
            refs = self._refs
            refs[overwritten] -= 1
            if not refs[overwritten]:
                self._drop(overwritten)

    def _drop(self, i: int) -> None:
        """Forget layout ``i``, which no row uses any more."""
        layout = self._layouts[i]
        assert layout is not None
        del self._layout_ids[layout.cache_key]
        self._layouts[i] = None
        self._free.append(i)
        if self._last_id == i:
            self._last, self._last_id, self._shape = None, -1, -1

    def _layout(self, keys: tuple[str, ...], types: tuple[type, ...]) -> _Layout:
        key = (keys, types)
        i = self._layout_ids.get(key)
        if i is None:
            if not all(t is int or t is float for t in types):  # int/float subclasses
                types = tuple(int if isinstance(t, type) and issubclass(t, int) else float
                              for t in types)
            # Site keys are new strings in every sample: one copy of each, shared by
            # every layout that has it, keeps a layout's memory to its tuple.
            interned = tuple(map(sys.intern, keys))
            layout = _Layout(interned, types, (interned, key[1]))
            if layout.packer.size > self._row_bytes:
                self._widen(layout.packer.size)
            if self._free:
                i = self._free.pop()
                self._layouts[i] = layout
            else:
                i = len(self._layouts)
                self._layouts.append(layout)
                self._refs.append(0)
            self._layout_ids[layout.cache_key] = i
        self._last = self._layouts[i]
        self._last_id = i
        return self._last  # type: ignore[return-value]

    def _widen(self, needed: int) -> None:
        """Wider rows: a new array, the live rows copied (few: this happens early in a run)."""
        old_w = self._row_bytes
        new_w = max(needed, 2 * old_w)
        data = bytearray(self.maxlen * new_w)
        old = self._data
        for j in range(self._len):
            r = self._row(j)
            data[r * new_w:r * new_w + old_w] = old[r * old_w:(r + 1) * old_w]
        self._data = data
        self._row_bytes = new_w

    def clear(self) -> None:
        """Forget every sample (the storage is kept)."""
        self._start = self._len = 0
        self._aside.clear()
        self._layouts, self._refs, self._free = [], [], []
        self._layout_ids = {}
        self._last, self._last_id, self._shape = None, -1, -1

    # -- reading -----------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    def _row(self, i: int) -> int:
        row = self._start + i
        return row - self.maxlen if row >= self.maxlen else row

    def _sample(self, row: int) -> Sample:
        i = self._rows[row]
        if i == _ASIDE:
            values = dict(self._aside[row])
        else:
            layout = self._layouts[i]
            assert layout is not None  # a row in use keeps its layout
            values = dict(zip(layout.keys, layout.packer.unpack_from(
                self._data, row * self._row_bytes)))
        return make_sample(self._times[row], self._step(row), self._pids[row], values)

    def _step(self, row: int) -> int | None:
        """The step of ``row`` (None if the sample had none; an int beyond int64 kept aside)."""
        step: int | None = self._steps[row] if self._has_step[row] else None
        if step is not None and self._aside:
            step = self._aside.get(-1 - row, step)
        return step

    @overload
    def __getitem__(self, i: int) -> Sample: ...

    @overload
    def __getitem__(self, i: slice) -> list[Sample]: ...

    def __getitem__(self, i: int | slice) -> Sample | list[Sample]:
        if isinstance(i, slice):
            return [self._sample(self._row(j)) for j in range(*i.indices(self._len))]
        n = self._len
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("history index out of range")
        return self._sample(self._row(i))

    def __iter__(self) -> Iterator[Sample]:
        for j in range(self._len):
            yield self._sample(self._row(j))

    def select(self, keep: Callable[[str], bool], start: int = 0) -> Iterator[Sample]:
        """The samples from index ``start``, oldest first, with only the keys ``keep`` accepts.

        One small dict at a time: reading a few metrics of a long history costs
        memory for those alone, not a dict of every key of every sample.
        """
        picks: dict[int, tuple[tuple[str, ...], tuple[int, ...]]] = {}
        for j in range(max(0, start), self._len):
            row = self._row(j)
            i = self._rows[row]
            if i == _ASIDE:
                values = {k: v for k, v in self._aside[row].items() if keep(k)}
            else:
                layout = self._layouts[i]
                assert layout is not None  # a row in use keeps its layout
                pick = picks.get(i)
                if pick is None:
                    at = tuple(n for n, k in enumerate(layout.keys) if keep(k))
                    pick = picks[i] = (tuple(layout.keys[n] for n in at), at)
                keys, at = pick
                row_values = layout.packer.unpack_from(self._data, row * self._row_bytes)
                values = dict(zip(keys, [row_values[n] for n in at]))
            yield make_sample(self._times[row], self._step(row), self._pids[row], values)

    def series(self, key: str) -> tuple[list[float], list[float]]:
        """``(x, y)`` for one metric; x is the step, or the sample index."""
        xs: list[float] = []
        ys: list[float] = []
        for i, s in enumerate(self):
            v = s.values.get(key)
            if v is not None:
                xs.append(float(s.step if s.step is not None else i))
                ys.append(float(v))
        return xs, ys

    def latest(self) -> dict[str, Number]:
        """The most recent value of every metric."""
        out: dict[str, Number] = {}
        for s in self:
            out.update(s.values)
        return out

    def __repr__(self) -> str:
        return f"<memprobe History of {self._len} samples, maxlen={self.maxlen}>"
