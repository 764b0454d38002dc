"""``check_rllib_leaks`` on a native leak of a few KiB per step (issue 24): C memory
malloc'ed through ctypes and never freed. The process serves it from heap RLlib's setup
freed, so rss stays flat over the 40 short episodes judged; malloc's bytes in use grow
by every byte kept. No Ray cluster."""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest

pytest.importorskip("ray.rllib")

from memprobe_test_leaky_env import _KeepingCartPole

from memprobe.probes.malloc import supported
from memprobe_rllib import check_rllib_leaks

pytestmark = pytest.mark.rllib

_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_LIBC.malloc.restype = ctypes.c_void_p
_LIBC.malloc.argtypes = [ctypes.c_size_t]
_LIBC.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
_LIBC.free.argtypes = [ctypes.c_void_p]
KEPT: list[int] = []


class NativeLeakCartPole(_KeepingCartPole):
    """Every ``step()`` keeps 2 KiB of C memory, touched, never freed."""

    def keep(self) -> None:
        p = _LIBC.malloc(2048)
        _LIBC.memset(p, 1, 2048)
        KEPT.append(p)


def _freed_heap(n_bytes: int) -> int:
    """Leave ``n_bytes`` of freed, touched heap in 2 KiB chunks, as a long setup does
    (RLlib's leaves megabytes): the allocator serves the next small mallocs from it. One
    chunk above them stays allocated, so that the heap's top is not given back; its
    address is returned, to free."""
    chunks = [_LIBC.malloc(2048) for _ in range(n_bytes // 2048)]
    for p in chunks:
        _LIBC.memset(p, 1, 2048)
    pin = _LIBC.malloc(2048)
    for p in chunks:
        _LIBC.free(p)
    return pin


def test_a_native_leak_of_2_kib_per_step_is_found_though_rss_is_flat() -> None:
    if not supported():
        pytest.skip("glibc's mallinfo2 is needed")
    from ray.rllib.algorithms.ppo import PPOConfig

    cfg = PPOConfig().environment(NativeLeakCartPole).debugging(log_level="ERROR")
    pin = _freed_heap(16 << 20)
    try:
        result = check_rllib_leaks(cfg, components=("env",))
    finally:
        for p in (*KEPT, pin):
            _LIBC.free(p)
        KEPT.clear()
    env = result["env"]
    rss = env.report.get("process/rss_bytes")
    assert "process/rss_bytes" not in env.grew, rss  # the fault: rss alone misses it
    assert env.leak and "malloc/in_use_bytes" in env.grew, str(result)
    in_use = env.report.get("malloc/in_use_bytes")
    # about 10 steps of 2 KiB per CartPole episode with a fixed action
    assert in_use.kind == "native" and in_use.slope_per_step > 10_000, in_use
    assert env.report.kind == "native", str(result)
