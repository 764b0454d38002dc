"""A helper module a user's program calls: it hands out buffers from a tiny C library
(compiled here with the system's C compiler, once, into the temporary directory) that
nobody frees. Through the library's own PLT, so memray's hooks see its ``malloc``."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

_SOURCE = r"""
#include <stdlib.h>
#include <string.h>
void *leaky_alloc(size_t n) { void *p = malloc(n); if (p) memset(p, 1, n); return p; }
"""


def _library() -> ctypes.CDLL:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("native_helper needs a C compiler (gcc or cc)")
    tag = hashlib.sha1(_SOURCE.encode()).hexdigest()[:12]
    so = os.path.join(tempfile.gettempdir(), f"memprobe-bench-leak-{tag}.so")
    if not os.path.exists(so):
        src = so[:-3] + ".c"
        with open(src, "w") as f:
            f.write(_SOURCE)
        subprocess.run([cc, "-g", "-O0", "-shared", "-fPIC", "-o", so, src], check=True)
    lib = ctypes.CDLL(so)
    lib.leaky_alloc.restype = ctypes.c_void_p
    lib.leaky_alloc.argtypes = [ctypes.c_size_t]
    return lib


_lib = _library()


def make_buffer(n: int) -> int:
    """A buffer of ``n`` bytes, touched; its address (the caller never frees it)."""
    return int(_lib.leaky_alloc(n))
