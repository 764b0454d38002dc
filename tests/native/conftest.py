"""Fixtures for the native-memory tests: a tiny C library the tests compile and load."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest

LEAK_C = r"""
#include <stdlib.h>
#include <string.h>

/* Allocates n bytes, touches them and hands them to the caller, who never frees them. */
void *leaky_alloc(size_t n) {
    void *p = malloc(n);
    if (p) memset(p, 1, n);
    return p;
}

/* Allocates and frees within the call: nothing survives. */
size_t scratch_alloc(size_t n) {
    char *p = malloc(n);
    size_t s = 0;
    if (p) { memset(p, 2, n); s = (size_t)p[n - 1]; free(p); }
    return s;
}

void release(void *p) { free(p); }
"""


@pytest.fixture(scope="session")
def leaklib(tmp_path_factory):
    """``libleak.so`` built with gcc from :data:`LEAK_C`, loaded with ctypes: ``leaky_alloc``
    mallocs through the library's own PLT, where memray's hooks see it."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("needs a C compiler")
    d = tmp_path_factory.mktemp("leaklib")
    src = d / "leak.c"
    src.write_text(LEAK_C)
    so = d / "libleak.so"
    subprocess.run([gcc, "-g", "-O0", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    lib = ctypes.CDLL(str(so))
    lib.leaky_alloc.restype = ctypes.c_void_p
    lib.leaky_alloc.argtypes = [ctypes.c_size_t]
    lib.scratch_alloc.restype = ctypes.c_size_t
    lib.scratch_alloc.argtypes = [ctypes.c_size_t]
    lib.release.restype = None
    lib.release.argtypes = [ctypes.c_void_p]
    return lib


@pytest.fixture(autouse=True)
def _no_memray_window_left():
    """Fail a test that leaves a memray window of memprobe open (its capture file,
    named after this process, still in the temporary directory)."""
    import glob
    import os
    import tempfile

    pattern = os.path.join(tempfile.gettempdir(), f"memprobe-memray-{os.getpid()}-*")
    before = set(glob.glob(pattern))
    yield
    left = set(glob.glob(pattern)) - before
    for path in left:
        os.unlink(path)
    if left:
        pytest.fail(f"memray capture files left behind: {sorted(left)}", pytrace=False)
