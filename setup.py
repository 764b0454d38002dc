"""The optional C extension ``memprobe._heapsample`` (the sampled heap).

Everything else is declared in pyproject.toml. The extension is optional: without a
C compiler, or with ``MEMPROBE_NO_EXTENSION=1``, the package installs in plain
Python and the ``heap`` probe says once that it is not available.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns and goes on when the extension cannot be compiled."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all (DistutilsPlatformError, ...)
            self.warn(f"memprobe._heapsample not built ({exc}); the heap probe is off")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # a compiler that fails (CompileError, LinkError)
            self.warn(f"memprobe._heapsample not built ({exc}); the heap probe is off")


extensions = [] if os.environ.get("MEMPROBE_NO_EXTENSION") == "1" else [
    Extension(
        "memprobe._heapsample",
        sources=["src/memprobe/_heapsample.c"],
        extra_compile_args=["-O2", "-Wall", "-Wextra"],
        optional=True,
    )
]

setup(ext_modules=extensions, cmdclass={"build_ext": OptionalBuildExt})
