"""The ``>>>`` examples in the docstrings run as shown, and each sits in a Markdown code
block.

The API reference (docs/api.md) renders the docstrings as Markdown: an example outside a
code block reads as nested block quotes (``>>>``), and an output such as
``[('eval', 'start'), ('eval', 'end')]`` as a link, which ``mkdocs build --strict`` rejects
as a missing cross-reference. Inside a ```` ```pycon ```` fence, with a blank line before
the closing fence (else doctest reads the fence as part of the expected output), an
example is a code block for Markdown and still an example for doctest.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(SRC.rglob("*.py")):
        if ">>>" in path.read_text():
            parts = path.relative_to(SRC).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = _modules_with_examples()


def test_there_are_examples_to_check() -> None:
    assert "memprobe.engine._prober" in MODULES and "memprobe.keys" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_each_example_is_in_a_markdown_code_block(name: str) -> None:
    tests = doctest.DocTestFinder().find(importlib.import_module(name))
    assert any(t.examples for t in tests), f"{name}: no examples found"
    for t in tests:
        if not t.examples or t.docstring is None:
            continue
        fence = None
        for i, line in enumerate(inspect.cleandoc(t.docstring).splitlines()):
            s = line.strip()
            if s.startswith("```"):
                fence = s[3:] if fence is None else None
            elif s.startswith(">>>"):
                assert fence == "pycon", (
                    f"{t.name}, docstring line {i + 1}: {s!r} is not in a ```pycon block")
        assert fence is None, f"{t.name}: a code block is not closed"


@pytest.mark.parametrize("name", MODULES)
def test_each_example_prints_what_it_shows(name: str) -> None:
    module = importlib.import_module(name)
    failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=False)
    assert not failed, f"{name}: {failed} of {attempted} examples failed"
