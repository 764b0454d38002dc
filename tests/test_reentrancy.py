"""sample() entered again by the thread already sampling (a signal handler, a hook)."""

from __future__ import annotations

import signal
import sys
import warnings

import pytest

import memprobe

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")


def test_a_signal_handler_that_samples_every_millisecond() -> None:
    prober = memprobe.Prober(["process", "gc"], history=100)
    nested: list[dict] = []

    def handler(signum, frame) -> None:
        nested.append(prober.sample())

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no probe may fail or be disabled
            with prober:
                try:
                    for step in range(10_000):
                        values = prober.sample(step=step)
                finally:  # before stop(): a sample() from the handler would start it again
                    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, old)
    assert nested, "the timer never fired"
    assert not any(sp.disabled for sp in prober._probes)
    assert values["memprobe/process/rss_bytes"] > 0 and "memprobe/gc/gen0/count" in values
    refused = [v for v in nested if not v]
    # Whatever landed inside a sample was refused and counted; the rest sampled normally.
    assert prober._reentrant == len(refused)
    assert values.get("memprobe/errors/reentrant", 0) in (len(refused), len(refused) - 1)
    assert all(k.endswith("reentrant") for k in values if "/errors/" in k)


def test_a_hook_that_calls_sample_gets_an_empty_result() -> None:
    calls: list[dict] = []

    class Recursive:
        @memprobe.hookimpl
        def memprobe_sample_flattened(self, values, prober):
            calls.append(prober.sample())
            return None

    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(Recursive(), name="recursive")
    limit = sys.getrecursionlimit()
    with pytest.warns(memprobe.ProbeFailedWarning,
                      match=r"plugin 'recursive' called prober.sample\(\) inside a sample") as seen:
        with memprobe.Prober(["process"], plugin_manager=pm) as prober:
            values = [prober.sample() for _ in range(5)]
    assert len(seen) == 1  # warned once, counted every time
    assert sys.getrecursionlimit() == limit
    assert calls == [{}] * 5
    # like every failure, a refused call shows in the samples after it
    assert [v.get("memprobe/errors/reentrant") for v in values] == [None, 1, 2, 3, 4]
    assert len(prober.history) == 5


def test_a_plugin_registered_without_a_name_is_named_by_its_class() -> None:
    class Broken:
        @memprobe.hookimpl
        def memprobe_sample_flattened(self, values, prober):
            raise RuntimeError("boom")

    pm = memprobe.get_plugin_manager(load_entrypoints=False)
    pm.register(Broken())  # pluggy names it by its id
    with pytest.warns(memprobe.ProbeFailedWarning, match="plugin 'Broken' failed"):
        with memprobe.Prober(["process"], plugin_manager=pm) as prober:
            values = prober.sample()
            values = prober.sample()
    assert values["memprobe/errors/Broken"] == 1


def test_a_sink_that_calls_sample_is_named_in_the_warning() -> None:
    class Nosy:
        prober: memprobe.Prober

        def write(self, sample: memprobe.Sample) -> None:
            assert self.prober.sample() == {}

        def close(self) -> None:
            pass

    sink = Nosy()
    with pytest.warns(memprobe.ProbeFailedWarning, match=r"plugin 'sink' called prober.sample"):
        with memprobe.Prober(["gc"], load_entrypoints=False, sink=sink) as prober:
            sink.prober = prober
            prober.sample()
            values = prober.sample()
    assert values["memprobe/errors/reentrant"] == 1
