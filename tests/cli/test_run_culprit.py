"""``memprobe run`` then ``memprobe report`` name the leaking site after a start-up that
passed through many allocation sites.

``memprobe run`` samples from the program's first line, so the sites of its start-up
(imports, plugins, configuration) each show in a sample's top and growth, and may fill
the Prober's ``max_site_keys`` (100) before the leak begins. They stop showing once the
start-up is over; the leaking site shows in every sample from then on and must get its
own key, not be summed into ``top/other``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HELPER = textwrap.dedent(
    """\
    import json
    KEPT = []
    def remember(text):
        KEPT.append(json.loads(text))
    """
)

#: 16 plugins of 12 lines each: more distinct top and growth keys than the cap (100)
#: while they load.
PLUGINS = 16

STARTUP = textwrap.dedent(
    f"""\
    import importlib, time

    # Start-up: plugins loaded one after another, each allocating at its own lines, as
    # the import of a large library does while the sampler runs.
    for i in range({PLUGINS}):
        importlib.import_module(f"plugin_{{i}}")
        time.sleep(0.05)
    """
)

THROUGH_LIBRARY = STARTUP + textwrap.dedent(
    """\
    import helper

    record = '"' + "x" * 50_000 + '"'
    for step in range(500):
        helper.remember(record)  # a 50 KB str made by json, kept by helper.py
        time.sleep(0.01)
    """
)

OWN_LINE = STARTUP + textwrap.dedent(
    """\
    KEPT = []
    for step in range(500):
        KEPT.append(bytearray(50_000))  # job.py:10: 50 KB kept at the program's own line
        time.sleep(0.01)
    """
)


def write_program(d: Path, job: str) -> None:
    for i in range(PLUGINS):
        (d / f"plugin_{i}.py").write_text(
            "".join(f"TABLE_{k} = bytes({1000 + 100 * i + k})\n" for k in range(12)))
    (d / "helper.py").write_text(HELPER)
    (d / "job.py").write_text(job)


def memprobe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memprobe", *args], cwd=cwd, capture_output=True, text=True,
        timeout=120,
    )


@pytest.mark.parametrize(("job", "target", "culprit"), [
    (THROUGH_LIBRARY, ["job.py"], "helper.py:4 → json/decoder.py:"),
    (THROUGH_LIBRARY, ["-m", "job"], "helper.py:4 → json/decoder.py:"),
    (OWN_LINE, ["job.py"], "job.py:10"),
], ids=["script-through-json", "module-through-json", "script-own-line"])
def test_run_report_names_the_leaking_site_not_other(
    tmp_path: Path, job: str, target: list[str], culprit: str
) -> None:
    write_program(tmp_path, job)
    run = memprobe("run", "--probes", "process,gc,tracemalloc", "--interval", "0.02",
                   "-o", "run.jsonl", *target, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    # The start-up's sites filled the cap: the run had more distinct sites than keys.
    lines = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert any("memprobe/tracemalloc/growth/other/size_bytes" in rec["values"] for rec in lines)
    report = memprobe("report", "--json", "run.jsonl", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    (proc,) = json.loads(report.stdout)["processes"]
    assert proc["kind"] == "python", proc
    assert proc["culprits"] and proc["culprits"][0].startswith(culprit), proc["culprits"]
    assert "other" not in proc["culprits"]
    text = memprobe("report", "run.jsonl", cwd=tmp_path).stdout
    suspects = text.split("top suspects:\n", 1)[1].splitlines()
    assert suspects[0].strip().startswith(culprit), text
