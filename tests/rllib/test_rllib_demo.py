"""``python -m memprobe_rllib.demo`` ends with an answer: one line per iteration, the
per-process summary, the PNG, and a report command that runs; no NaN, no Ray "E" lines.

The demo's ``main`` runs in the session's Ray (it uses a Ray already running and
leaves it running), with fewer iterations than its default.
"""

from __future__ import annotations

import logging
import re
import subprocess

import pytest

pytest.importorskip("ray.rllib")
pytest.importorskip("matplotlib")

from memprobe_rllib import demo

pytestmark = pytest.mark.rllib
ITERATIONS = 2
#: A line Ray's C++ core logs at level E (``[... E 123 456] file.cc:1: ...``, glog's
#: ``E1204 12:00:00``) or Python's logging at ERROR (``[E``).
RAY_ERROR_LINE = re.compile(r"\] E |\bE\d{4} |\[E")


def test_the_demo_ends_with_a_summary_a_plot_and_a_report_command(
        ray_session, tmp_path, capfd, monkeypatch):
    for name in ("RAY_BACKEND_LOG_LEVEL", "RAY_DEDUP_LOGS"):  # restored after the test
        monkeypatch.delenv(name, raising=False)
    levels = {n: logging.getLogger(n).level for n in ("ray", "ray.rllib", "ray.tune")}
    try:
        assert demo.main(["--iterations", str(ITERATIONS), "--logdir", str(tmp_path)]) == 0
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)
    out, err = capfd.readouterr()
    text = out + err
    assert not re.search(r"nan", text, re.IGNORECASE), text
    assert not [line for line in text.splitlines() if RAY_ERROR_LINE.search(line)], text
    assert ray_session.is_initialized()  # the session's Ray, left running

    lines = out.splitlines()
    iteration_lines = [line for line in lines if re.match(r"\s*\d+\s+\d+\.\d+s ", line)]
    assert [int(line.split()[0]) for line in iteration_lines] == list(range(1, ITERATIONS + 1))

    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["process", "start"])
    rows = lines[header + 1:header + 3]
    assert rows[0].split()[0] == "driver" and rows[1].split()[:3] == ["env", "runner", "1"], out
    for row in rows:
        assert re.search(r"MiB\s+[+-]\d+\.\d MiB  \S", row), row
        assert any(words in row for words in demo.PLAIN.values()), row

    png = tmp_path / "memory.png"
    assert f"memory over the iterations: {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    command = lines[lines.index("the full report:") + 1].strip()
    report = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "2 process(es)" in report.stdout
    assert (tmp_path / "report.html").stat().st_size > 0
