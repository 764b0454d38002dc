"""Issue 24: objects the user keeps that own native memory (a ``torch.Tensor``'s
storage is not traced by tracemalloc, the tensor object is). The kind is native, never
"retained objects", and the culprit is the user's line that makes them. Run in a fresh
interpreter: the resident size and its floor are the program's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_USER_MODULE = textwrap.dedent("""\
    import torch
    KEPT = []
    def keep():
        KEPT.append(torch.ones(65536))  # 256 KiB of storage per call
""")

# The gc probe's live blocks grow by one per call (the tensor object); the objects
# probe would say the same at a heap walk per call.
_PROGRAM = textwrap.dedent("""\
    import json, torch, memprobe, torchkeep
    torch.set_num_threads(1)
    r = memprobe.check_leaks(torchkeep.keep, repeats=30,
                             probes={"process": {}, "gc": {"blocks": True}})
    rss = r.get("process/rss_bytes")
    print(json.dumps({"kind": r.kind, "culprit": r.culprit, "rss": rss.status,
                      "rss_kind": rss.kind, "note": rss.note}))
""")


def test_kept_torch_tensors_are_native_memory_at_the_users_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "torchkeep.py").write_text(_USER_MODULE)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-c", _PROGRAM], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": path})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["rss"] == "leak", got
    assert got["rss_kind"] == "native" and got["kind"] == "native", got
    assert got["culprit"] == "torchkeep.py:4", got
    assert "retained objects hold it" in got["note"], got


# Tensors kept from heap the process freed before (a long setup leaves megabytes):
# the resident size grows by a fraction of the storage kept, malloc's bytes in use by
# all of it, and the tensor objects' few traced bytes are a sizeable share of the
# resident growth alone. Python's share is judged against malloc's growth.
_FREED_HEAP_PROGRAM = textwrap.dedent("""\
    import ctypes, ctypes.util, json, torch, memprobe, torchkeep
    torch.set_num_threads(1)
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    chunks = [libc.malloc(2048) for _ in range(8192)]  # 16 MiB, touched, then freed
    for p in chunks:
        libc.memset(p, 1, 2048)
    pin = libc.malloc(2048)  # keeps the heap's top from being given back
    for p in chunks:
        libc.free(p)
    r = memprobe.check_leaks(torchkeep.keep_small, repeats=40, probes={
        "process": {}, "tracemalloc": {}, "objects": {"top": 30}, "malloc": {}})
    rss = r.get("process/rss_bytes")
    print(json.dumps({"kind": r.kind, "culprit": r.culprit, "rss": rss.status,
                      "rss_kind": rss.kind, "in_use": r.get("malloc/in_use_bytes").status}))
""")


def test_tensors_kept_from_freed_heap_are_native_at_the_users_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from memprobe.probes.malloc import supported

    if not supported():
        pytest.skip("glibc's mallinfo2 is needed")
    (tmp_path / "torchkeep.py").write_text(_USER_MODULE + textwrap.dedent("""\
        def keep_small():
            for _ in range(8):
                KEPT.append(torch.ones(512))  # 2 KiB of storage each
    """))
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-c", _FREED_HEAP_PROGRAM], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": path})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["in_use"] == "leak", got
    assert got["kind"] == "native", got  # was python: the objects' traced bytes
    assert got["culprit"] == "torchkeep.py:7", got
