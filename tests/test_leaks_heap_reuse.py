"""A native leak served from heap the program freed before: the resident size reads
levelled off (the allocator reuses the freed pages), malloc's bytes in use grow by all of
it. ``check_leaks``, ``assert_no_leak`` and the pytest marker judge the bytes in use, and
the check's own memory does not grow them, so healthy functions still pass."""

from __future__ import annotations

import ctypes
import json
import tracemalloc

import pytest

import memprobe

# Imported before pytester's inline runs (see test_pytest_plugin).
import memprobe.leak._alarm
import memprobe.leak._peak
import memprobe.leaks
from memprobe.probes import malloc

pytestmark = pytest.mark.skipif(not malloc.supported(), reason="needs glibc's mallinfo2()")
pytest_plugins = ["pytester"]

CHUNK = 16 * 1024
PROGRAM_HEAP = """
import ctypes
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]

# Heap the program used and freed before: 400 chunks of 16 KiB, all but the last freed
# (the last keeps the freed ones below the heap's top, so they are not given back).
_before = [libc.malloc(16 * 1024) for _ in range(400)]
for p in _before:
    libc.memset(p, 1, 16 * 1024)
for p in _before[:-1]:
    libc.free(p)
KEPT = []

def leaky():
    p = libc.malloc(16 * 1024)  # never freed: the native leak
    libc.memset(p, 1, 16 * 1024)
    KEPT.append(p)
"""


@pytest.fixture
def heap_reuse_leak():
    """``leaky``, a function that mallocs 16 KiB a call and keeps it, in a process
    whose heap holds 6 MiB it freed before."""
    namespace: dict = {}
    exec(compile(PROGRAM_HEAP, "heap_program.py", "exec"), namespace)
    yield namespace["leaky"]
    libc = ctypes.CDLL("libc.so.6")
    libc.free.argtypes = [ctypes.c_void_p]
    for p in namespace["KEPT"]:
        libc.free(p)


def test_check_leaks_judges_a_leak_into_reused_heap_native(heap_reuse_leak) -> None:
    report = memprobe.check_leaks(heap_reuse_leak, repeats=40)
    rss = report.get("process/rss_bytes")
    assert rss is not None and not rss.leaking, rss  # the freed pages hide it from rss
    in_use = report.get("malloc/in_use_bytes")
    assert in_use is not None and in_use.leaking, in_use
    assert CHUNK * 0.9 < in_use.slope_per_step < CHUNK * 1.2, in_use
    assert in_use.kind == "native", in_use


def test_assert_no_leak_fails_a_leak_into_reused_heap(heap_reuse_leak) -> None:
    with pytest.raises(memprobe.LeakError, match=r"malloc/in_use_bytes: \+1[56]\d{3}"):
        memprobe.assert_no_leak(heap_reuse_leak, repeats=40)


def test_the_marker_fails_a_leak_into_reused_heap(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PROGRAM_HEAP + """
import pytest

@pytest.mark.memprobe_leak_check(repeats=40)
def test_leaky():
    leaky()

@pytest.mark.memprobe_leak_check(repeats=40)
def test_churn():
    ptrs = [libc.malloc(16 * 1024) for _ in range(8)]
    for p in ptrs:
        libc.free(p)
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*malloc/in_use_bytes*"])
    assert "test_leaky" in result.stdout.str().split("short test summary")[1]


DOC = json.dumps({"a": list(range(300)), "b": {"c": "x" * 2000}})


def _numpy_churn():
    np = pytest.importorskip("numpy")
    return lambda: float(np.ones(8192).sum())


HEALTHY = {
    "noop": lambda: lambda: None,
    "json": lambda: lambda: json.loads(DOC),
    "list": lambda: lambda: len([str(i) * 40 for i in range(3000)]),
    "bytes": lambda: lambda: len(bytes(200_000)),
    "numpy": _numpy_churn,
}


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_functions_pass_with_mallocs_bytes_judged(name: str) -> None:
    """Churn through json, numpy, lists and large bytes keeps nothing: no metric leaks,
    malloc's bytes in use among them."""
    fn = HEALTHY[name]()
    report = memprobe.assert_no_leak(fn, repeats=40)
    assert "memprobe/malloc/in_use_bytes" in report.verdicts
    report = memprobe.check_leaks(fn, repeats=40)
    in_use = report.get("malloc/in_use_bytes")
    assert in_use is not None and not in_use.leaking, in_use
    assert in_use.status in ("ok", "levelled", "slight"), in_use


def test_the_checks_own_memory_does_not_grow_mallocs_bytes_in_use() -> None:
    """What a check keeps per call would read as the checked function's native growth.
    A Prober without an alarm takes each sample's judged values into columns made once,
    so a check of a function that does nothing keeps no new block per call (it kept a
    dozen, and with tracemalloc's trace of each, about 1 KiB of malloc's bytes a call)."""
    counts = []

    def nothing() -> None:
        counts.append(len(tracemalloc.take_snapshot().traces))

    report = memprobe.check_leaks(nothing, repeats=45)
    in_use = report.get("malloc/in_use_bytes")
    assert in_use is not None and in_use.status != "leak", in_use
    assert abs(in_use.slope_per_step) < 256, in_use
    # Blocks alive at each call, from call 10 on: the snapshot's own list and its count.
    per_call = (counts[-1] - counts[10]) / (len(counts) - 11)
    assert per_call < 4, counts


@pytest.mark.parametrize("lib", ["numpy", "json"])
def test_a_python_leak_seen_by_malloc_alone_says_what_its_kind_rests_on(lib: str) -> None:
    """numpy's arrays and json's long strings are malloc's bytes too: without tracemalloc,
    malloc's bytes in use growing is no evidence of native memory. The verdict says what
    it rests on and how to tell; with tracemalloc the same leak is Python's, at the
    user's line."""
    kept: list = []
    if lib == "numpy":
        np = pytest.importorskip("numpy")

        def leak() -> None:
            kept.append(np.ones(4096))
    else:
        doc = json.dumps(["x" * 30_000])

        def leak() -> None:
            kept.append(json.loads(doc))
    report = memprobe.check_leaks(leak, repeats=40, probes=["process", "malloc"],
                                  tracemalloc_top=None)
    in_use = report.get("malloc/in_use_bytes")
    assert in_use is not None and in_use.leaking, in_use
    assert "not told from Python's" in in_use.note, in_use.note
    assert "the tracemalloc probe, which did not run, tells them apart" in in_use.note
    report = memprobe.check_leaks(leak, repeats=40, probes=["process", "malloc"])
    in_use = report.get("malloc/in_use_bytes")
    assert in_use is not None and in_use.kind == "python", in_use
    assert "not told" not in in_use.note
    assert in_use.culprits and in_use.culprits[0].startswith("tests/test_leaks_heap_reuse.py:")


def test_a_native_leak_seen_with_tracemalloc_is_native_without_doubt(heap_reuse_leak) -> None:
    in_use = memprobe.check_leaks(heap_reuse_leak, repeats=40).get("malloc/in_use_bytes")
    assert in_use is not None and in_use.kind == "native" and "not told" not in in_use.note
