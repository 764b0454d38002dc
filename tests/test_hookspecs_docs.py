"""Every hook spec is documented in docs/plugins.md with its exact signature."""

from __future__ import annotations

import inspect
import pathlib

from memprobe import hookspecs

DOC = pathlib.Path(__file__).parents[1] / "docs" / "plugins.md"


def _hooks() -> list[str]:
    return [n for n, f in vars(hookspecs).items() if n.startswith("memprobe_") and callable(f)]


def test_there_are_hooks() -> None:
    assert "memprobe_register_probes" in _hooks()


def test_every_hook_is_documented_with_its_signature() -> None:
    text = DOC.read_text()
    for name in _hooks():
        params = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
        assert f"### `{name}({params})`" in text, f"{name}({params}) is not in {DOC.name}"


def test_every_hook_has_a_docstring_with_params_and_returns() -> None:
    for name in _hooks():
        doc = inspect.getdoc(getattr(hookspecs, name)) or ""
        for p in inspect.signature(getattr(hookspecs, name)).parameters:
            assert f":param {p}:" in doc, (name, p)
        assert ":returns:" in doc and "Called" in doc, name
