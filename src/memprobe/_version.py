"""memprobe's version (the same as pyproject.toml's; a test holds them together)."""

__version__ = "0.1.0"
