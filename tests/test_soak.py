"""A short soak: once the history ring buffer is full, sampling allocates nothing that stays.

The long version, a million samples, is ``python benchmarks/soak.py``.
"""

from __future__ import annotations

import gc
import os
import tracemalloc

import pytest

import memprobe

MEMPROBE_FILES = os.path.join(os.path.dirname(os.path.abspath(memprobe.__file__)), "*")


def memprobe_traced_bytes() -> int:
    """Live traced bytes whose allocating frame is in one of memprobe's files."""
    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, MEMPROBE_FILES)])
    return sum(stat.size for stat in snap.statistics("filename"))


@pytest.mark.parametrize("probes", [None, ["process", "gc", "tracemalloc"]],
                         ids=["default", "with-tracemalloc-probe"])
def test_sampling_after_warmup_does_not_grow_memprobes_memory(probes, tmp_path) -> None:
    # Tracing starts before the Prober exists, so the samples that fill the history
    # are traced too: what is live at the end, minus what was live after warm-up,
    # is what memprobe kept from the samples in between.
    samples = 20_000 if probes is None else 2_000
    kw = {} if probes is None else {"probes": {"process": {}, "gc": {},
                                              "tracemalloc": {"top": 5, "every": 10}}}
    tracemalloc.start(1)
    try:
        prober = memprobe.Prober(history=1000, load_entrypoints=False,
                                 sink=tmp_path / "soak.jsonl", **kw)
        with prober:
            for i in range(1500):  # fills the ring buffer, the key caches, the sink's file
                prober.sample(step=i)
            gc.collect()
            after_warmup = memprobe_traced_bytes()
            for i in range(1500, 1500 + samples):
                values = prober.sample(step=i)
            gc.collect()
            end = memprobe_traced_bytes()
            assert len(prober.history) == 1000
            assert not [k for k in values if "/errors/" in k]
    finally:
        tracemalloc.stop()
    assert after_warmup > 100_000  # the history itself: the measurement sees memprobe
    assert end - after_warmup < 64 * 1024, (after_warmup, end)
    with open(tmp_path / "soak.jsonl") as f:
        assert sum(1 for _ in f) == 1500 + samples
