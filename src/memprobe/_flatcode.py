"""A built-in probe's flat sampler as source code, so that the Prober can compile it
alone (the probe's flat sampler) or fused with the other probes' into one function
(the Prober's plain path: docs/performance.md).

A fragment is Python source with its own names marked ``$``: ``$f`` is a local of
the fragment, ``$probe`` a name bound from :attr:`FlatCode.names`, ``$now`` the
``perf_counter()`` read just before the fragment runs. Each use gets a prefix of its
own, so fragments fused into one function do not see each other's names.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._errors import MemprobeError


class Unusable(MemprobeError):
    """Raised by a fragment, before it changes anything, when it cannot give its values
    now (a forked child before the probe reopens its files): the probe's ordinary
    ``sample()`` gives them instead. It never leaves the Prober."""


@dataclass(frozen=True)
class FlatCode:
    """One probe's flat sampler as source.

    :ivar body: statements (no indentation of their own beyond their blocks') that
        read the probe; they may raise :class:`Unusable` before changing anything.
    :ivar items: the items of the dict display of the probe's values under their final
        keys, in the order of the probe's samples (``**$d`` allowed).
    :ivar names: what the ``$`` names that are not locals of the body are bound to.
    """

    body: str
    items: str
    names: Mapping[str, Any] = field(default_factory=dict)

    def resolve(self, tag: str, now: str, indent: int) -> tuple[str, str]:
        """The body, indented by ``indent`` spaces, and the items, with ``$now`` read as
        ``now`` and every other ``$name`` as ``<tag>name``."""
        def sub(text: str) -> str:
            return text.replace("$now", now).replace("$", tag)

        return textwrap.indent(sub(self.body.strip("\n")), " " * indent), sub(self.items)

    def bind(self, tag: str, namespace: dict[str, Any]) -> None:
        """Put the fragment's bound names into ``namespace`` under ``tag``."""
        for name, value in self.names.items():
            namespace[tag + name] = value


def literal(key: str) -> str:
    """``key`` as a str literal for a fragment: ``repr``, with any ``$`` escaped so
    that :meth:`FlatCode.resolve` cannot read it as a name."""
    return repr(key).replace("$", "\\x24")


def compile_flat_sampler(code: FlatCode | None) -> Callable[[], dict[str, Any] | None] | None:
    """A probe's flat sampler alone (None for no code: the probe has none for its
    options): its values as a new dict, or None when the fragment raises
    :class:`Unusable`."""
    if code is None:
        return None
    ns: dict[str, Any] = {"perf_counter": time.perf_counter, "Unusable": Unusable}
    code.bind("p_", ns)
    body, items = code.resolve("p_", "now", 8)
    lines = ["def sample():", "    now = perf_counter()", "    try:", body,
             "    except Unusable:", "        return None", f"    return {{{items}}}", ""]
    exec(compile("\n".join(lines), "<memprobe flat sampler>", "exec"), ns)
    return ns["sample"]  # type: ignore[no-any-return]
