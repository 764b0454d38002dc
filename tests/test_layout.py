"""The layout of the package: imports point one way, modules stay small, no private reach-ins.

Read from the source with ``ast`` (nothing is imported): every ``import`` counts,
at module level, inside functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

SRC = pathlib.Path(__file__).parents[1] / "src"
PACKAGE = SRC / "memprobe"
MAX_LINES = 500


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(package: pathlib.Path) -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in sorted(package.rglob("*.py"))}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(module: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The memprobe modules ``module`` imports, anywhere in its source."""
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path.name == "__init__.py", node)
            # ``from . import hookspecs`` imports a submodule; ``from .x import y`` imports x
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != module:
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    mods = {m: p for pkg in (PACKAGE, SRC / "memprobe_ray", SRC / "memprobe_rllib")
            for m, p in _modules(pkg).items()}
    known = set(mods)
    # A package's __init__ counts like any module: a module that imports its own
    # package's face, or another's, closes a circle through it.
    return {m: imports_of(m, p, known) for m, p in mods.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m):], m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_graph_is_read() -> None:
    graph = _graph()
    assert "memprobe.engine._options" in graph["memprobe.engine._prober"]
    assert "memprobe._sample" in graph["memprobe.engine._sinks"]


def test_the_graph_spans_the_integrations() -> None:
    graph = _graph()
    assert "memprobe.cli" in graph and "memprobe_ray.dashboard" in graph
    assert "memprobe_ray.dashboard" in graph["memprobe.cli"]


def test_no_import_cycle_among_memprobe_modules() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_sinks_and_hookspecs_do_not_import_the_engine() -> None:
    graph = _graph()
    for low in ("memprobe.engine._sinks", "memprobe.hookspecs", "memprobe._sample", "memprobe.keys",
                "memprobe.metrics"):
        assert "memprobe.engine._prober" not in graph[low], low


def _module_params() -> list:
    return [pytest.param(p, id=str(p.relative_to(PACKAGE))) for p in sorted(PACKAGE.rglob("*.py"))]


@pytest.mark.parametrize("path", _module_params())
def test_no_module_is_over_the_line_limit(path: pathlib.Path) -> None:
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(SRC)} has {n} lines (limit {MAX_LINES})"


def _private_imports(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] == "memprobe":
                if any(p.startswith("_") for p in parts[1:]):
                    bad.append(f"{path.name}:{node.lineno} from {node.module}")
                bad += [f"{path.name}:{node.lineno} {node.module}.{a.name}"
                        for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            bad += [f"{path.name}:{node.lineno} import {a.name}" for a in node.names
                    if a.name.startswith("memprobe.") and any(
                        p.startswith("_") for p in a.name.split(".")[1:])]
    return bad


def test_the_integrations_import_no_private_memprobe_names() -> None:
    bad = [b for pkg in ("memprobe_rllib", "memprobe_ray")
           for p in sorted((SRC / pkg).rglob("*.py")) for b in _private_imports(p)]
    assert not bad, bad


def test_the_cli_imports_no_private_names_of_other_memprobe_modules() -> None:
    """The CLI is part of the package but a layer on top: it asks the public API."""
    paths = [PACKAGE / "cli.py", *sorted((PACKAGE / "cli").rglob("*.py"))]
    bad = []
    for path in paths:
        if not path.exists():
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.names:
                bad += [f"{path.name}:{node.lineno} {a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.endswith("__")]
    assert not bad, bad


def test_private_import_finder_finds_them(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("from memprobe.engine._prober import parse_probes\nfrom memprobe import _errors\n"
                 "from memprobe import Prober\nimport memprobe._x\n")
    assert len(_private_imports(f)) == 3


#: A dotted name into a private module or a private member of the three packages.
PRIVATE_IN_DOCS = re.compile(r"\bmemprobe(?:_rllib|_ray)?(?:\.\w+)*\._\w+")


def test_the_docs_show_no_private_names() -> None:
    """What the README and docs/ show a user is public: no ``memprobe._x`` names."""
    root = SRC.parent
    bad = []
    for path in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            bad += [f"{path.relative_to(root)}:{lineno} {m}"
                    for m in PRIVATE_IN_DOCS.findall(line)]
    assert not bad, bad


def test_private_names_in_docs_are_found() -> None:
    text = ("`memprobe.leak._series.judged_keys` memprobe_rllib._options.LEAK_OPTIONS "
            "memprobe.keys._site_roots memprobe.read_samples memprobe_rllib.demo")
    assert PRIVATE_IN_DOCS.findall(text) == [
        "memprobe.leak._series", "memprobe_rllib._options", "memprobe.keys._site_roots"]


#: Taking a string apart at ``/``: only keys.py does it to keys.
SLASH_SPLIT = re.compile(r"""\.(?:r?split|r?partition)\(\s*["']/["']""")
#: A unit read from a name's ending: only the registry's default does it.
UNIT_FROM_NAME = re.compile(r"""endswith\(\s*\(?["']_(?:bytes|seconds)["']""")
#: Files that split at ``/`` what is not a key, with why.
SLASH_ALLOWED = {
    "memprobe/keys.py": "the key format's owner",
    "memprobe_ray/logs.py": "paths of log files on Ray's nodes, not keys",
}
UNIT_ALLOWED = {"memprobe/metrics.py": "the default declaration of an undeclared metric"}


def _source_lines(pattern: re.Pattern[str], allowed: dict[str, str]) -> list[str]:
    bad = []
    for pkg in ("memprobe", "memprobe_ray", "memprobe_rllib"):
        for path in sorted((SRC / pkg).rglob("*.py")):
            rel = str(path.relative_to(SRC))
            if rel in allowed:
                continue
            for lineno, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line.split("#", 1)[0]):
                    bad.append(f"{rel}:{lineno}: {line.strip()}")
    return bad


def test_no_key_is_taken_apart_outside_keys_py() -> None:
    """Keys are split and built by :mod:`memprobe.keys` alone (``split_short``,
    ``split_site_key``, ``key_of``...), so that the format has one owner."""
    bad = _source_lines(SLASH_SPLIT, SLASH_ALLOWED)
    assert not bad, "\n".join(bad)


def test_no_unit_is_read_from_a_name_ending() -> None:
    """Units come from the probes' declarations (``prober.describe``,
    ``memprobe.describe_key``, ``Verdict.unit``), never from ``_bytes`` at a name's end."""
    bad = _source_lines(UNIT_FROM_NAME, UNIT_ALLOWED)
    assert not bad, "\n".join(bad)


def test_the_source_checks_find_what_they_look_for() -> None:
    assert SLASH_SPLIT.search('probe, _, metric = short.partition("/")')
    assert SLASH_SPLIT.search("parts = key.rsplit('/', 1)")
    assert not SLASH_SPLIT.search('label.split(",")')
    assert UNIT_FROM_NAME.search('if key.endswith("_bytes"):')
    assert not UNIT_FROM_NAME.search('if name.endswith("_total"):')


# -- wings: sub-packages with one-way imports ------------------------------------------
#: Each wing's rank: a module imports its own wing's modules and lower ranks' only.
WING_RANK = {"base": 0, "probes": 1, "leak": 2, "engine": 3, "report": 3, "cli": 4, "top": 5,
             "face": 6}
#: Public modules that keep their public path at the top of the package, by wing.
PUBLIC_WINGS = {"memprobe.capture": "leak", "memprobe.referrers": "leak",
                "memprobe.leaks": "top", "memprobe.pytest_plugin": "top",
                "memprobe.__main__": "top"}


def wing_of(module: str) -> str | None:
    """The wing of a memprobe module (None outside memprobe)."""
    parts = module.split(".")
    if parts[0] != "memprobe":
        return None
    if module == "memprobe":  # the package's face re-exports the public API from below
        return "face"
    for public, wing in PUBLIC_WINGS.items():
        if module == public or module.startswith(public + "."):
            return wing
    if len(parts) > 1 and parts[1] in ("engine", "leak", "report", "cli", "probes"):
        return parts[1]
    return "base"


def wing_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in graph.items():
        here = wing_of(mod)
        if here is None:
            continue
        for dep in deps:
            there = wing_of(dep)
            if there is None or there == here:
                continue
            if WING_RANK[there] >= WING_RANK[here]:
                bad.append(f"{mod} ({here}) imports {dep} ({there})")
    return sorted(bad)


def test_wings_import_one_way() -> None:
    """base < probes < leak < engine, report < cli and the checks (leaks, pytest_plugin):
    the report reads files and never imports the engine, the engine never the report."""
    bad = wing_violations(_graph())
    assert not bad, "\n".join(bad)


def test_the_wing_rule_finds_an_upward_import() -> None:
    assert wing_violations({"memprobe.report._runs": {"memprobe.engine._prober"}})
    assert wing_violations({"memprobe.keys": {"memprobe.leak._alarm"}})
    assert not wing_violations({"memprobe.engine._prober": {"memprobe.leak._alarm",
                                                            "memprobe.keys"}})


def test_every_private_module_lives_in_a_wing_or_the_base() -> None:
    """The top of the package holds the base (keys, metrics, hookspecs, errors...) and the
    public modules; the engine, the leak verdicts, the report and the CLI are wings."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    base = {"__init__", "__main__", "_checks", "_entrypoints", "_errors", "_flatten",
            "_format", "_jsonl_fields", "_keptfd", "_pid", "_plugins", "_registry", "_version",
            "_sample", "_sitestats", "_tracing", "capture", "hookspecs", "keys", "leaks",
            "metrics", "referrers", "trend"}
    assert set(top) <= base, sorted(set(top) - base)


def test_the_version_is_pyprojects() -> None:
    import tomllib

    import memprobe

    with open(SRC.parent / "pyproject.toml", "rb") as f:
        assert memprobe.__version__ == tomllib.load(f)["project"]["version"]
