"""Every output README.md and docs/quickstart.md show is produced here by running the
snippet beside it, and the test fails when the output no longer has the shape shown.

A snippet or an output is the fenced block right after a ``<!-- docs-test: NAME -->``
comment. The shape of an output is its lines with every number replaced by ``N``
(and an amount of bytes, in whatever unit, by ``N bytes``), runs of spaces
collapsed, and the verdict of a metric that does not leak (``ok``, ``growing
slightly``, ``levelled off``) written ``calm``: a different machine prints other
numbers, never other lines, metrics, sites or words.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"<!-- docs-test: (?P<name>\S+) -->\n```[a-z]*\n(?P<body>.*?)```", re.S)
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?")
_CALM = re.compile(r"\b(ok|growing slightly|levelled off)$")
#: A whole-process verdict line that another machine may add: rss follows the allocator;
#: malloc's bytes in use are judged where the malloc probe runs (glibc 2.33+).
_VERDICT = re.compile(r"^(process/\w+|malloc/in_use_bytes): leak, ")
_BYTES = re.compile(r"\bN (B|KiB|MiB|GiB|TiB)\b")


def blocks(doc: str) -> dict[str, str]:
    """``{name: text}`` of the marked blocks of ``doc`` (a path under the repository)."""
    found = {m["name"]: m["body"] for m in _BLOCK.finditer((ROOT / doc).read_text())}
    assert found, f"{doc} has no docs-test blocks"
    return found


def shape(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        line = _BYTES.sub("N bytes", _CALM.sub("calm", _NUMBER.sub("N", line.strip())))
        line = re.sub(r"-{2,}", "--", re.sub(r"\s+", " ", line))
        if line:
            out.append(line)
    return out


def run_commands(commands: str, cwd: Path) -> str:
    """The stdout of each ``memprobe`` or ``pytest`` command, run by this interpreter."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    out = []
    for line in commands.strip().splitlines():
        argv = shlex.split(line)
        module = {"memprobe": "memprobe", "pytest": "pytest"}[argv[0]]
        res = subprocess.run([sys.executable, "-m", module, *argv[1:]], cwd=cwd, env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode in (0, 1), (line, res.stdout, res.stderr)
        out.append(res.stdout)
    return "".join(out)


@pytest.mark.parametrize("doc, prefix", [("README.md", "readme"),
                                         ("docs/quickstart.md", "quickstart")])
def test_the_no_code_path_prints_the_report_shown(tmp_path: Path, doc: str, prefix: str) -> None:
    b = blocks(doc)
    (tmp_path / "job.py").write_text(b[f"{prefix}/job.py"])
    printed = run_commands(b[f"{prefix}/commands"], tmp_path)
    assert shape(printed) == shape(b[f"{prefix}/report"]), printed


def test_the_quickstart_pytest_example_prints_the_failure_and_summary_shown(
        tmp_path: Path) -> None:
    b = blocks("docs/quickstart.md")
    (tmp_path / "test_app.py").write_text(b["quickstart/test_app.py"])
    printed = run_commands(b["quickstart/pytest"], tmp_path)
    got = shape(printed)
    for name in ("quickstart/failure", "quickstart/summary"):
        shown = shape(b[name])
        start = next((i for i, line in enumerate(got) if line == shown[0]), None)
        assert start is not None, (name, printed)
        # Another whole-process metric may be judged leaking too on another machine (rss
        # follows the allocator): one more verdict line, never a different one.
        lines = [line for line in got[start:] if line in shown or not _VERDICT.match(line)]
        assert lines[:len(shown)] == shown, printed


def test_shape_keeps_words_and_drops_numbers() -> None:
    assert shape("  process/rss_bytes  17.6 MiB  +30.1 KiB  LEAK +35.8 GiB/h\n") == [
        "process/rss_bytes N bytes N bytes LEAK N bytes/h"]
    assert shape("x  growing slightly") == shape("x ok") == ["x calm"]
    assert shape("x LEAK +1 B/h") != shape("x ok")


def test_the_command_page_has_one_exit_status_table_with_every_status() -> None:
    """docs/cli.md states the exit statuses once, and the statuses the code returns are
    all in it: 0, 1 (a broken pipe), 2 (memprobe's own error), EXIT_LEAK, the program's."""
    from memprobe.cli import EXIT_LEAK

    text = (ROOT / "docs" / "cli.md").read_text()
    assert text.count("## Exit status") == 1
    table = text.split("## Exit status", 1)[1].split("\n## ", 1)[0]
    statuses = [row.split("|")[1].strip() for row in table.splitlines()
                if row.startswith("| ") and not row.startswith("| status")]
    assert statuses == ["0", "1", "2", str(EXIT_LEAK), "any"], statuses
