"""The isolation worker: a daemon thread that runs an isolated probe's calls.

A probe with ``isolate=True`` runs in its own worker so that a call which
hangs past the probe's time limit can be abandoned (the thread is left to
finish or hang on its own) instead of blocking the caller's loop.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from .._pid import getpid


class IsolationWorker:
    """Runs calls in one daemon thread; a call over its timeout abandons the thread."""

    __slots__ = ("_pid", "_queue", "abandoned", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[Any] | None = None
        self._pid = -1
        self.abandoned = False

    def call(self, fn: Callable[[], Any], timeout: float) -> Any:
        """``fn()`` in the worker thread; ``TimeoutError`` if it takes over ``timeout`` s."""
        if self._queue is None or self._pid != getpid():  # first call, or forked since
            self._queue = queue.SimpleQueue()
            self._pid = getpid()
            threading.Thread(
                target=self._run, args=(self._queue,), name=f"memprobe-{self.name}", daemon=True
            ).start()
        box: list[Any] = [None, None]
        done = threading.Event()
        self._queue.put((fn, box, done))
        if not done.wait(timeout):
            self.abandoned = True
            self._queue = None  # the hung thread keeps its queue; nothing more is sent to it
            raise TimeoutError(f"did not return within {timeout:g} s")
        if box[1] is not None:
            raise box[1]
        return box[0]

    @staticmethod
    def _run(q: queue.SimpleQueue[Any]) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            fn, box, done = item
            try:
                box[0] = fn()
            except BaseException as exc:  # handed to the caller, who decides
                box[1] = exc
            done.set()
            del item, fn, box, done

    def close(self) -> None:
        """Let the thread end (after the call it runs, if any)."""
        if self._queue is not None and self._pid == getpid():
            self._queue.put(None)
        self._queue = None
