"""A Prober's history: the last N samples in storage allocated up front.

A ring of Python objects (a ``deque`` of samples, each with its own dict of
boxed numbers) grows the process by about 600 bytes per sample until it is
full, which is exactly what a leak looks like to a verdict on ``rss_bytes``.
Here the numbers live in one preallocated ``array('d')`` of ``maxlen`` rows,
one column per key; the memory is touched when the history is made, so it
does not grow as the ring fills. It grows only when a key is seen for the
first time (a new column, bounded by the site-key cap), which happens in the
first samples of a run.

Each row records its *layout*: the keys present in that sample, in order,
their columns and which values are ints. Samples are rebuilt as
:class:`memprobe.Sample` objects when read. An int too large for a double to
hold exactly (over 2**53) is kept as it is beside the array.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

from ._sample import Number, Sample

#: Ints beyond this magnitude are not exact as doubles: such values are kept aside.
_EXACT = 2**53
_MIN_COLUMNS = 32
#: The longest history (its storage is allocated up front: 8 bytes per key per sample).
MAX_HISTORY = 10_000_000


class _Layout:
    """The keys of one kind of row, their columns, and which of their values are ints."""

    __slots__ = ("cols", "contiguous", "first", "ints", "keys", "types")

    def __init__(self, keys: tuple[str, ...], types: tuple[type, ...], cols: tuple[int, ...]):
        self.keys = keys
        self.types = types
        self.cols = cols
        self.ints = tuple(t is int for t in types)
        self.first = cols[0] if cols else 0
        self.contiguous = cols == tuple(range(self.first, self.first + len(cols)))


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
        self._layouts: list[_Layout] = []
        self._layout_ids: dict[tuple[tuple[str, ...], tuple[type, ...]], int] = {}
        self._last: _Layout | None = None
        self._last_id = -1
        self._columns: dict[str, int] = {}
        self._width = _MIN_COLUMNS
        self._data = array("d", [0.0]) * (maxlen * self._width)
        self._exact: dict[int, dict[int, Any]] = {}  # row -> {column: value} kept aside
        self._start = 0
        self._len = 0

    # -- writing -----------------------------------------------------------
    def append(self, time_seconds: float, step: int | None, pid: int,
               values: Mapping[str, Number]) -> None:
        """Store one sample (the oldest is dropped when full). ``values`` is copied."""
        vals = tuple(values.values())
        keys = tuple(values)
        types = tuple(map(type, vals))
        layout = self._last
        if layout is None or keys != layout.keys or types != layout.types:
            layout = self._layout(keys, types)
        n = self._len
        if n < self.maxlen:
            row = self._start + n
            if row >= self.maxlen:
                row -= self.maxlen
            self._len = n + 1
        else:
            row = self._start
            self._start = row + 1 if row + 1 < self.maxlen else 0
        if self._exact:
            self._exact.pop(row, None)
        self._times[row] = time_seconds
        if step is None:
            self._has_step[row] = 0
        else:
            self._has_step[row] = 1
            try:
                self._steps[row] = step
            except OverflowError:
                self._steps[row] = 0
                self._exact.setdefault(row, {})[-1] = step
        self._pids[row] = pid
        self._rows[row] = self._last_id
        base = row * self._width
        data = self._data
        if layout.contiguous:
            start = base + layout.first
            data[start:start + len(vals)] = array("d", vals)
        else:
            for c, v in zip(layout.cols, vals):
                data[base + c] = v
        if vals and (max(vals) > _EXACT or min(vals) < -_EXACT):
            aside = {c: v for c, v in zip(layout.cols, vals)
                     if type(v) is int and not -_EXACT <= v <= _EXACT}
            if aside:
                self._exact.setdefault(row, {}).update(aside)

    def _layout(self, keys: tuple[str, ...], types: tuple[type, ...]) -> _Layout:
        key = (keys, types)
        i = self._layout_ids.get(key)
        if i is None:
            columns = self._columns
            for k in keys:
                if k not in columns:
                    columns[k] = len(columns)
            if len(columns) > self._width:
                self._widen(len(columns))
            i = self._layout_ids[key] = len(self._layouts)
            self._layouts.append(_Layout(keys, types, tuple(columns[k] for k in keys)))
        self._last = self._layouts[i]
        self._last_id = i
        return self._last

    def _widen(self, needed: int) -> None:
        width = self._width
        new = max(needed, 2 * width)
        data = array("d", [0.0]) * (self.maxlen * new)
        old = self._data
        for r in range(self.maxlen):
            data[r * new:r * new + width] = old[r * width:(r + 1) * width]
        self._data = data
        self._width = new

    def clear(self) -> None:
        """Forget every sample (the storage is kept)."""
        self._start = self._len = 0
        self._exact.clear()

    # -- reading -----------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    def _row(self, i: int) -> int:
        row = self._start + i
        return row - self.maxlen if row >= self.maxlen else row

    def _sample(self, row: int) -> Sample:
        layout = self._layouts[self._rows[row]]
        base = row * self._width
        data = self._data
        values: dict[str, Number] = {}
        for k, c, is_int in zip(layout.keys, layout.cols, layout.ints):
            v = data[base + c]
            values[k] = int(v) if is_int else v
        aside = self._exact.get(row)
        step: int | None = self._steps[row] if self._has_step[row] else None
        if aside:
            for c, v in aside.items():
                if c < 0:
                    step = v
                else:
                    values[layout.keys[layout.cols.index(c)]] = v
        return make_sample(self._times[row], step, self._pids[row], values)

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
