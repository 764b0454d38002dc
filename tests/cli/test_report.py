"""`memprobe report` as a person reads it: every process file whatever its prefix, units
from the probes' declarations, hints, and an HTML page with everything the text shows."""

from __future__ import annotations

import json
import mmap
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import memprobe
from memprobe.report._runs import load_runs, summarize

LEAKY_DEFAULT_PROBES = textwrap.dedent(
    """\
    import mmap, time
    held = []
    for i in range(80):
        m = mmap.mmap(-1, 256 * 1024)
        m.write(b"x" * (256 * 1024))  # fresh pages: rss grows
        held.append(m)
        time.sleep(0.01)
    """
)


def memprobe_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memprobe", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def _driver_file(path: Path, n: int = 40) -> None:
    """A Prober with the RLlib driver's prefix and tags, leaking fresh pages."""
    sink = memprobe.JsonlSink(path, tags={"role": "driver"})
    held = []
    with memprobe.Prober(["process", "gc"], prefix="memprobe/driver", sink=sink,
                         load_entrypoints=False) as prober:
        for step in range(n):
            m = mmap.mmap(-1, 512 * 1024)
            m.write(b"x" * (512 * 1024))
            held.append(m)
            prober.sample(step=step)
    for m in held:
        m.close()


def test_driver_files_are_read_whatever_their_prefix(tmp_path: Path) -> None:
    _driver_file(tmp_path / "driver.jsonl")
    (runs,) = load_runs([str(tmp_path / "driver.jsonl")])
    assert runs.prefix == "memprobe/driver" and runs.label.endswith("(role=driver)")
    summary = summarize(runs)
    rss = next(m for m in summary.metrics if m.short == "process/rss_bytes")
    assert rss.key == "memprobe/driver/process/rss_bytes" and rss.unit == "bytes"
    assert rss.leak and rss.growth > 10 * 2**20
    res = memprobe_cli("report", "driver.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "(role=driver)" in res.stdout
    line = next(x for x in res.stdout.splitlines() if "process/rss_bytes" in x)
    assert "MiB" in line and "LEAK" in line


def test_units_come_from_declarations_for_any_prefix() -> None:
    assert memprobe.describe_key("memprobe/driver/process/rss_bytes", "memprobe/driver").unit == "bytes"
    assert memprobe.describe_key("memprobe/driver/overhead/sample_seconds", "memprobe/driver").unit == "seconds"
    assert memprobe.describe_key("x/overhead/fraction", "x").unit == "fraction"
    assert memprobe.describe_key("x/errors/sink", "x").unit == "count"  # declared by pattern, no suffix
    assert memprobe.describe_key("no-prefix-key", "memprobe").unit == ""


def test_leak_with_default_probes_says_how_to_name_the_line(tmp_path: Path) -> None:
    (tmp_path / "leaky.py").write_text(LEAKY_DEFAULT_PROBES)
    res = memprobe_cli("run", "--interval", "0.01", "-o", "d.jsonl", "leaky.py", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    res = memprobe_cli("report", "d.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "LEAK" in res.stdout
    assert ("hint: to name the line that leaks, rerun with --probes process,gc,tracemalloc"
            in res.stdout)


@pytest.mark.parametrize("tags, how", [
    ({}, "run longer or sample more often"),
    ({"role": "main", "command": "job.py"}, "run longer or lower --interval"),  # memprobe run
    ({"role": "driver"}, "run more train() iterations"),  # memprobe_rllib's driver
])
def test_too_few_samples_says_how_many_and_how_to_get_more(tmp_path: Path, tags: dict,
                                                           how: str) -> None:
    lines = []
    for i in range(12):
        lines.append(json.dumps({"time": 100.0 + i, "step": i, "pid": 3, **tags, "values": {
            "memprobe/process/rss_bytes": 1000 * i, "memprobe/overhead/sample_seconds": 1e-5}}))
    (tmp_path / "short.jsonl").write_text("\n".join(lines) + "\n")
    res = memprobe_cli("report", "short.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "too few samples" in res.stdout
    assert f"need 20 samples, got 12 — {how}" in res.stdout, res.stdout


def _slow_samples(tmp_path: Path, sample_seconds: float, tracemalloc_seconds: float) -> str:
    """``memprobe report`` on 12 samples of ``memprobe run`` 1 s apart, each taking
    ``sample_seconds`` (``tracemalloc_seconds`` of it the tracemalloc probe's)."""
    lines = []
    for i in range(12):
        lines.append(json.dumps({"time": 100.0 + i, "step": i, "pid": 3, "role": "main",
                                 "command": "job.py", "values": {
            "memprobe/process/rss_bytes": 1000 * i,
            "memprobe/overhead/sample_seconds": sample_seconds,
            "memprobe/overhead/process_seconds": 0.01, "memprobe/tracemalloc/traced_bytes": 5,
            "memprobe/overhead/tracemalloc_seconds": tracemalloc_seconds}}))
    (tmp_path / "slow.jsonl").write_text("\n".join(lines) + "\n")
    res = memprobe_cli("report", "slow.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_too_few_slow_samples_do_not_say_lower_the_interval(tmp_path: Path) -> None:
    """A sample of 0.8 s every second (0.79 s of it tracemalloc's): a lower --interval
    would add few, so the hint says what took the time."""
    out = _slow_samples(tmp_path, 0.8, 0.79)
    assert ("need 20 samples, got 12 — run longer: a sample took 0.8 s (tracemalloc 0.79 s) "
            "of the 1 s between samples, so a lower --interval adds few") in out, out
    assert "lower --interval\n" not in out


def test_report_says_the_budget_spaced_too_few_samples(tmp_path: Path) -> None:
    """A sample of 0.2 s every second (the default budget's share): the budget spaced
    them, so the hint says to raise it rather than lower --interval."""
    out = _slow_samples(tmp_path, 0.2, 0.19)
    assert ("need 20 samples, got 12 — run longer or raise --budget: a sample took 0.2 s "
            "(tracemalloc 0.19 s) of the 1 s between samples, so a lower --interval adds "
            "few") in out, out


@pytest.fixture(scope="module")
def leaky_traced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("traced")
    (d / "leaky.py").write_text(
        "import time\nheld = []\nfor i in range(100):\n"
        "    held.append(bytearray(200_000))\n    time.sleep(0.01)\n")
    res = memprobe_cli("run", "--probes", "process,gc,tracemalloc", "--interval", "0.01",
                       "-o", "run.jsonl", "leaky.py", cwd=d)
    assert res.returncode == 0, res.stderr
    return d


def test_html_shows_everything_the_text_shows(leaky_traced: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    res = memprobe_cli("report", "run.jsonl", "--html", str(tmp_path / "r.html"),
                       cwd=leaky_traced)
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "r.html").read_text()
    text = res.stdout
    assert "top suspects:" in text and "top suspects</h3>" in page
    assert "leaky.py:4" in text and "leaky.py:4" in page
    note = next(line for line in text.splitlines() if line.startswith("  note: "))
    assert note.strip() in page
    assert "Command: <code>leaky.py</code>" in page
    assert text.strip().splitlines()[-1] in page  # "1 process(es), N leaking metric(s)"
    heading = text.splitlines()[0].removeprefix("== ")
    assert heading in page
    for line in text.splitlines()[2:]:
        if line.startswith("  process/"):
            for cell in line.split("  "):
                if cell.strip():
                    assert f"<td>{cell.strip()}</td>" in page


def test_plot_labels_stay_inside_their_panel_and_counts_get_integer_ticks(
        leaky_traced: Path) -> None:
    pytest.importorskip("matplotlib")
    from memprobe.report._render_png import figure, pyplot

    plt = pyplot()
    summaries = [summarize(r) for r in load_runs([str(leaky_traced / "run.jsonl")])]
    fig = figure(plt, summaries)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        labels = 0
        for ax in fig.axes:
            frame = ax.get_window_extent(renderer)
            for text in ax.texts:
                if text.get_text().startswith("growing from"):
                    labels += 1
                    box = text.get_window_extent(renderer)
                    assert frame.x0 <= box.x0 and box.x1 <= frame.x1, text.get_text()
                    assert frame.y0 <= box.y0 and box.y1 <= frame.y1, text.get_text()
            if ax.get_ylabel() == "process/num_fds":
                ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
                assert ticks and all(float(t).is_integer() for t in ticks), ticks
        assert labels >= 2  # rss and filtered bytes leak
        # memprobe's own file (9 to 10 fds) is no leak: no panel spent on it
        assert "process/num_fds" not in [ax.get_ylabel() for ax in fig.axes]
    finally:
        plt.close(fig)
