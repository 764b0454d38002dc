"""The metric-key format, both ways: ``<prefix>/<probe>/<metric>``.

Every key a Prober emits is ``prefix + "/" + probe + "/" + metric``. The prefix
may itself contain ``/`` (``memprobe/driver``); the probe is one component; the
metric may contain ``/`` (``top/<site>/size_bytes``, where the site is a path).
Besides the probes' own sections, a Prober writes the sections in
:data:`PROBER_SECTIONS`. This module is the one place that builds keys and
takes them apart; nothing else slices keys by hand.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
import sysconfig
from collections.abc import Collection, Iterable
from typing import NamedTuple

#: The default first component of every key.
DEFAULT_PREFIX = "memprobe"
#: The sections a Prober adds beside its probes' (its own cost, failures, verdicts).
PROBER_SECTIONS = ("overhead", "errors", "timeouts", "leak")
#: The key every sample carries, under the prefix: how a reader finds the prefix.
SAMPLE_SECONDS = "overhead/sample_seconds"
#: The metric of an allocation site / type key: ``top/<name>/size_bytes`` and its kin.
SITE_SECTIONS = ("top", "growth", "survivors")

#: Characters a key part keeps; everything else (whitespace included) becomes ``_``.
#: This is the set TensorBoard, MLflow and WandB accept in tag names, plus ``:``
#: for ``file.py:line`` allocation sites.
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-/:]+")


class KeyParts(NamedTuple):
    """A key taken apart: ``prefix`` (may hold ``/``, may be empty), ``probe``, ``metric``."""

    prefix: str
    probe: str
    metric: str


@functools.lru_cache(maxsize=8192)
def sanitize_key(part: str) -> str:
    """Make one key part safe for metric backends.

    Runs of whitespace and of characters outside ``[A-Za-z0-9_.-/:]`` become one
    ``_``; leading and trailing separators are dropped; an empty part becomes ``_``.
    Idempotent: ``sanitize_key(sanitize_key(s)) == sanitize_key(s)``.
    """
    out = _UNSAFE.sub("_", part).strip("/")
    out = re.sub("/{2,}", "/", out)
    return out or "_"


def prefix_path(prefix: str) -> str:
    """The sanitized prefix with its trailing ``/``: what every key starts with
    (``""`` for none)."""
    return sanitize_key(prefix) + "/" if prefix else ""


def join_prefix(*parts: str) -> str:
    """A prefix of several parts (``join_prefix("memprobe", "driver")``: ``memprobe/driver``),
    each sanitized; empty parts are left out."""
    return "/".join(sanitize_key(p) for p in parts if p)


def make_key(prefix: str, probe: str, metric: str) -> str:
    """``<prefix>/<probe>/<metric>`` with each part sanitized (the prefix may be ``""``)."""
    return f"{prefix_path(prefix)}{sanitize_key(probe)}/{sanitize_key(metric)}"


def pattern_key(prefix: str, probe: str, pattern: str) -> str:
    """The keys a declared metric pattern stands for, as the docs and ``memprobe probes``
    show them: ``memprobe/gc/gen<N>/count`` (the ``<N>`` kept, not sanitized)."""
    return f"{prefix_path(prefix)}{sanitize_key(probe)}/{pattern}"


def split_key(key: str, prefix: str) -> KeyParts:
    """Take ``key`` apart, given the prefix it was built with.

    ```pycon
    >>> split_key("memprobe/driver/process/rss_bytes", "memprobe/driver")
    KeyParts(prefix='memprobe/driver', probe='process', metric='rss_bytes')

    ```

    :raises ValueError: ``key`` does not start with ``prefix`` or has no metric.
    """
    head = prefix_path(prefix)
    if not key.startswith(head):
        raise ValueError(f"key {key!r} does not start with the prefix {prefix!r}")
    probe, sep, metric = key[len(head):].partition("/")
    if not sep or not probe or not metric:
        raise ValueError(f"key {key!r} has no <probe>/<metric> after the prefix {prefix!r}")
    return KeyParts(head[:-1], probe, metric)


def short_key(key: str, prefix: str) -> str:
    """``<probe>/<metric>``: the key without its prefix (the key itself if it lacks it)."""
    head = prefix_path(prefix)
    return key[len(head):] if head and key.startswith(head) else key


def infer_prefix(keys: Iterable[str]) -> str | None:
    """The prefix of a sample's keys, from the :data:`SAMPLE_SECONDS` key every sample has.

    ```pycon
    >>> infer_prefix(["memprobe/driver/process/rss_bytes",
    ...               "memprobe/driver/overhead/sample_seconds"])
    'memprobe/driver'

    ```

    ``None`` when no key ends in it (not a Prober's sample).
    """
    tail = "/" + SAMPLE_SECONDS
    for k in keys:
        if k == SAMPLE_SECONDS:
            return ""
        if k.endswith(tail):
            return k[: -len(tail)]
    return None


def site_name(metric: str, sections: Collection[str] = SITE_SECTIONS) -> str | None:
    """The site or type inside ``<section>/<name>/<stat>``, else ``None``.

    ``sections`` are the first components that hold a name: by default the probes'
    ``top``, ``growth`` and ``survivors``; the RLlib adapter's leak keys name their
    culprits as ``culprit/<name>/rate_per_hour``.

    ```pycon
    >>> site_name("top/train.py:12/size_bytes")
    'train.py:12'
    >>> site_name("culprit/env.py:40/rate_per_hour", sections=("culprit",))
    'env.py:40'

    ```
    """
    section, sep, rest = metric.partition("/")
    if not sep or section not in sections:
        return None
    name, sep, _stat = rest.rpartition("/")
    return name if sep and name else None


class SiteParts(NamedTuple):
    """A per-site metric taken apart: ``top/<name>/size_bytes`` is
    ``SiteParts("top", "<name>", "size_bytes")``."""

    section: str
    name: str
    stat: str


def split_site(metric: str, sections: Collection[str] = SITE_SECTIONS) -> SiteParts | None:
    """The parts of ``<section>/<name>/<stat>`` (a metric, without probe), else ``None``.

    ```pycon
    >>> split_site("survivors/env.py:40/size_bytes")
    SiteParts(section='survivors', name='env.py:40', stat='size_bytes')

    ```
    """
    name = site_name(metric, sections)
    if name is None:
        return None
    section, _, rest = metric.partition("/")
    return SiteParts(section, name, rest[len(name) + 1:])


def split_site_key(key: str, prefix: str) -> tuple[str, SiteParts] | None:
    """``(probe, parts)`` of a per-site key written under ``prefix``, else ``None``.

    ```pycon
    >>> split_site_key("memprobe/tracemalloc/top/env.py:40/count", "memprobe")
    ('tracemalloc', SiteParts(section='top', name='env.py:40', stat='count'))

    ```
    """
    head = prefix_path(prefix)
    if not key.startswith(head):
        return None
    probe, metric = split_short(key[len(head):])
    parts = split_site(metric) if probe else None
    return None if parts is None else (probe, parts)


def site_metric(section: str, name: str, stat: str) -> str:
    """``<section>/<name>/<stat>``: the metric of a site or type (the name sanitized)."""
    return f"{section}/{sanitize_key(name)}/{stat}"


def split_short(short: str) -> tuple[str, str]:
    """``(probe, metric)`` of ``<probe>/<metric>`` (a key without its prefix);
    ``("", short)`` when it has no probe."""
    probe, sep, metric = short.partition("/")
    return (probe, metric) if sep else ("", short)


def key_of(prefix: str, short: str) -> str:
    """The full key of ``<probe>/<metric>`` under ``prefix``."""
    return make_key(prefix, *split_short(short))


def metric_path(metric: str) -> list[str]:
    """The components of a metric (``top/<site>/size_bytes`` has three; a site's own
    ``/`` is kept inside its component)."""
    parts = split_site(metric)
    if parts is not None:
        return list(parts)
    return metric.split("/")


#: The section of the leak verdicts' keys (:data:`PROBER_SECTIONS`).
LEAK_SECTION = "leak"


def leak_key(prefix: str, *names: str) -> str:
    """``<prefix>/leak/<names...>``: a key of the leak verdicts (``leak_key(p, "suspect")``,
    ``leak_key(p, "process/rss_bytes", "rate_per_hour")``)."""
    return f"{prefix_path(prefix)}{LEAK_SECTION}/" + "/".join(sanitize_key(n) for n in names)


def is_leak_key(key: str, name: str) -> bool:
    """Whether ``key`` is ``<any prefix>/leak/<name>`` (``is_leak_key(k, "hours_to_oom")``)."""
    tail = f"{LEAK_SECTION}/{name}"
    return key == tail or key.endswith("/" + tail)


def culprit_key(prefix: str, name: str) -> str:
    """``<prefix>/leak/culprit/<name>/rate_per_hour``: the growth rate blamed on a culprit
    (a site, a type, ``native``, ``fds``)."""
    return leak_key(prefix, "culprit", name, "rate_per_hour")


@functools.lru_cache(maxsize=1)
def _install_roots() -> tuple[str, ...]:
    """The interpreter's library directories (``sysconfig``: fixed for its life, and about
    a millisecond to work out, once per distinct file otherwise)."""
    paths = sysconfig.get_paths()
    return tuple(paths[n] for n in ("purelib", "platlib", "stdlib", "platstdlib") if n in paths)


@functools.lru_cache(maxsize=4)
def _site_roots(path: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """Directories a source path is shortened against, for ``sys.path`` = ``path``,
    longest first (so site-packages wins over the stdlib directory above it)."""
    roots = [p for p in path if p and ("site-packages" in p or "dist-packages" in p)]
    roots += _install_roots()
    out = []
    for r in roots:
        r = os.path.normpath(os.path.abspath(r))
        out.append((r + os.sep, r))
    out.sort(key=lambda t: len(t[0]), reverse=True)
    return list(dict.fromkeys(out))


@functools.lru_cache(maxsize=8192)
def shorten_path(filename: str) -> str:
    """Shorten a source path for use in a key.

    Relative to site-packages (``ray/rllib/env/env_runner.py``), the standard
    library (``json/decoder.py``) or the working directory (``train.py``);
    other absolute paths keep their last two components. ``<frozen ...>`` and
    similar pseudo-files are kept as they are, without the brackets.
    """
    if filename.startswith("<"):
        return filename.strip("<>").replace(" ", "_")
    path = os.path.normpath(filename)
    if not os.path.isabs(path):
        return path.replace(os.sep, "/")
    candidates = [*_site_roots(tuple(sys.path))]
    cwd = os.getcwd()
    candidates.append((cwd + os.sep, cwd))
    best = ""
    for with_sep, _ in candidates:
        if path.startswith(with_sep) and len(with_sep) > len(best):
            best = with_sep
    if best:
        return path[len(best):].replace(os.sep, "/")
    parts = path.split(os.sep)
    return "/".join(parts[-2:])


def key_head(key: str) -> str:
    """A key's first two parts (``memprobe/big`` of ``memprobe/big/x``): its prefix and
    probe where the prefix is one part, named when a key is refused at write time."""
    return "/".join(key.split("/", 2)[:2])


def format_culprit(site: str) -> str:
    """A site or type name as a report shows it: a chain of frames (oldest first,
    joined by ``--`` in keys) reads ``my_env.py:26 → numpy/_core/numeric.py:232``."""
    return site.replace("--", " → ")




def first_frame(site: str) -> str:
    """A site's or culprit chain's first frame: ``app.py:12`` of ``app.py:12--numpy/...``
    (a key) or of ``app.py:12 → numpy/...`` (a report)."""
    return site.split("--", 1)[0].split(" → ", 1)[0]


def frame_line(frame: str) -> int | None:
    """The line number of a Python frame (``app.py:12``: 12); None for a C function or
    ``unknown``."""
    _, sep, line = frame.rpartition(":")
    return int(line) if sep and line.isdigit() else None


def ends_in_c_frame(site: str) -> bool:
    """Whether a site or culprit chain ends in a C function memray named
    (``app.py:12 → leaky_alloc``, ``app.py:12--leaky_alloc``, ``leaky_alloc``), not in a
    Python line (``app.py:12``, ``<string>:3``, ``app.py:12 → numpy/_core/numeric.py:232``)
    or memray's ``unknown``."""
    last = format_culprit(site).rsplit(" → ", 1)[-1].strip()
    return bool(last) and last != "unknown" and frame_line(last) is None


def format_site(filename: str, lineno: int) -> str:
    """``package/file.py:line`` for an allocation site."""
    return f"{shorten_path(filename)}:{lineno}"


def is_library_site(site: str) -> bool:
    """Whether a site's first frame (``numpy/_core/numeric.py:232``, ``json/decoder.py:353``,
    in a site key or a culprit chain) is in the standard library or an installed package,
    not the user's own code (``app.py:12``, ``<string>:3``, ``<ipython-input-1-…>:2``).
    Cheap for the many sites of a window's snapshot: decided once per module or package."""
    first = first_frame(site)
    head = first.split("/", 1)[0].split(":", 1)[0]
    if head == first.split(":", 1)[0] and ":" in first and not head.endswith(".py"):
        # A pseudo-file, its brackets dropped by the key (``string:3`` is ``<string>``,
        # not the standard library's ``string`` module): the user's unless frozen.
        return head.startswith(("frozen", "<frozen"))
    return _is_library_head(head)


@functools.lru_cache(maxsize=1024)
def _is_library_head(head: str) -> bool:
    """:func:`is_library_site` for a site's first path part (``numpy``, ``app.py``)."""
    if head.startswith(("frozen", "<frozen")):
        return True
    name = head[:-3] if head.endswith(".py") else head
    try:
        spec = importlib.util.find_spec(name) if name.isidentifier() else None
    except (ImportError, ValueError):
        spec = None
    origin = getattr(spec, "origin", None) or ""
    if spec is not None and origin in ("built-in", "frozen"):
        return True
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    return bool(origin) and any(origin.startswith(r) for r in roots)


def is_library_type(name: str) -> bool:
    """Whether a type name (``dict``, ``collections.Counter``, ``ray.rllib.x.Episode``)
    is a builtin's or comes from the standard library or an installed package."""
    module = name.rsplit(".", 1)[0] if "." in name else ""
    if module == "__main__":  # the user's script, whatever runs it
        return False
    return not module or is_library_site(module.split(".", 1)[0] + ".py")
