"""The memprobe command, driven as a user would: subprocesses, real files, real leaks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

LEAKY = textwrap.dedent(
    """\
    import sys, time
    held = []

    def leak():
        held.append(bytearray(200_000))

    for i in range(150):  # enough samples for a verdict (40 with the auto warm-up)
        leak()
        time.sleep(0.01)
    print("program output", sys.argv[1:])
    print("program error", file=sys.stderr)
    sys.exit(3)
    """
)


def memprobe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memprobe", *args], cwd=cwd, capture_output=True, text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def leaky_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    d = tmp_path_factory.mktemp("leaky")
    (d / "leaky.py").write_text(LEAKY)
    res = memprobe("run", "--probes", "process,gc,tracemalloc", "--interval", "0.01",
                   "-o", "run.jsonl", "leaky.py", "a", "--b", cwd=d)
    return d, res


def test_run_preserves_exit_code_and_output(leaky_run) -> None:
    d, res = leaky_run
    assert res.returncode == 3, res.stderr
    assert res.stdout == "program output ['a', '--b']\n"
    assert res.stderr.startswith("program error\n")
    lines = (d / "run.jsonl").read_text().splitlines()
    assert len(lines) >= 20
    rec = json.loads(lines[-1])
    assert rec["role"] == "main" and rec["values"]["memprobe/process/rss_bytes"] > 10e6


def test_report_names_the_leaking_line(leaky_run) -> None:
    d, _ = leaky_run
    res = memprobe("report", "run.jsonl", cwd=d)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    rss_line = next(line for line in out.splitlines() if "process/rss_bytes" in line)
    assert "LEAK" in rss_line
    # filtered_bytes (memprobe's own allocations left out) is judged, not traced_bytes.
    traced = next(line for line in out.splitlines() if "tracemalloc/filtered_bytes" in line)
    assert "LEAK" in traced
    assert "top suspects:" in out
    assert "leaky.py:5" in out  # held.append(bytearray(200_000))
    # A site's growth is per sample (the program's loop steps are not what was counted).
    site = next(line for line in out.splitlines() if "leaky.py:5" in line)
    assert "/sample" in site and "/step" not in out, site


def test_report_flat_run_is_not_a_leak(tmp_path: Path) -> None:
    (tmp_path / "flat.py").write_text("import time\nfor i in range(50):\n    time.sleep(0.01)\n")
    assert memprobe("run", "--interval", "0.01", "-o", "f.jsonl", "flat.py", cwd=tmp_path
                    ).returncode == 0
    res = memprobe("report", "f.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "LEAK" not in res.stdout and "0 leaking metric(s)" in res.stdout


def test_plot_is_a_real_png(leaky_run, tmp_path: Path) -> None:
    image = pytest.importorskip("matplotlib.image")
    import numpy as np

    d, _ = leaky_run
    out = tmp_path / "p.png"
    res = memprobe("report", "run.jsonl", "--plot", str(out), "--html", str(tmp_path / "r.html"),
                   cwd=d)
    assert res.returncode == 0, res.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000
    pixels = image.imread(str(out))
    assert pixels.shape[0] > 300 and pixels.shape[1] > 600
    rgb = pixels[..., :3].reshape(-1, 3)
    assert len(np.unique(rgb, axis=0)) > 50  # lines, text, the red leak marker
    red = (rgb[:, 0] > 0.9) & (rgb[:, 1] < 0.2) & (rgb[:, 2] < 0.2)
    assert red.sum() > 20  # the leak marker
    page = (tmp_path / "r.html").read_text()
    assert "data:image/png;base64," in page and "LEAK" in page


def test_run_module_and_uncaught_exception(tmp_path: Path) -> None:
    (tmp_path / "mymod.py").write_text(
        "import sys\nprint('module', sys.argv[1:])\nraise RuntimeError('boom')\n"
    )
    res = memprobe("run", "-o", "m.jsonl", "-m", "mymod", "x", cwd=tmp_path)
    assert res.returncode == 1
    assert res.stdout == "module ['x']\n"
    assert "RuntimeError: boom" in res.stderr and "Traceback" in res.stderr
    assert "runpy" not in res.stderr
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) >= 2  # start + exit


def test_bad_lines_are_named_and_skipped(leaky_run, tmp_path: Path) -> None:
    d, _ = leaky_run
    lines = (d / "run.jsonl").read_text().splitlines()
    lines.insert(2, "not json")
    text = "\n".join(lines) + "\n" + lines[-1][: len(lines[-1]) // 2]  # a truncated last line
    (tmp_path / "bad.jsonl").write_text(text)
    res = memprobe("report", "bad.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "bad.jsonl:3: bad line skipped" in res.stderr
    assert f"bad.jsonl:{len(lines) + 1}: truncated last line skipped" in res.stderr
    assert "process/rss_bytes" in res.stdout


def test_missing_file_is_one_clear_line(tmp_path: Path) -> None:
    res = memprobe("report", "nope.jsonl", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr == "memprobe: error: nope.jsonl: no such file\n"
    res = memprobe("run", "nope.py", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr == "memprobe: error: nope.py: no such file\n"


def test_unknown_probe_suggests(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("print('never')\n")
    res = memprobe("run", "--probes", "proces", "x.py", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stdout == ""
    lines = [x for x in res.stderr.splitlines() if not x.startswith("memprobe: warning: ")]
    assert len(lines) == 1 and lines[0].startswith("memprobe: error: probes: unknown probe")
    assert "did you mean 'process'" in lines[0]


def test_probes_lists_metrics_and_costs(tmp_path: Path) -> None:
    res = memprobe("probes", "--repeat", "2", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for name in ("process", "gc", "tracemalloc", "objects"):
        assert f"\n{name}  (plugin" in "\n" + out
    # Units and kinds are the probes' declarations (memprobe.metrics), not read from names.
    assert re.search(r"memprobe/process/rss_bytes +bytes +gauge +resident set size", out)
    assert re.search(r"memprobe/process/num_fds +count +gauge", out)
    assert re.search(r"memprobe/gc/gen<N>/collections_count +count +counter", out)
    assert re.search(r"memprobe/gc/collection_seconds +seconds +interval", out)
    assert re.search(r"memprobe/tracemalloc/traced_bytes +bytes", out)
    assert "per sample, measured here" in out and "n/a" not in out


def test_report_merges_several_files_with_progress(leaky_run, tmp_path: Path) -> None:
    d, _ = leaky_run
    other = tmp_path / "other.jsonl"
    lines = (d / "run.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in lines]
    for r in recs:
        r["pid"] += 1
        r["env_runner"] = 1
    other.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    res = memprobe("report", str(d / "run.jsonl"), str(other), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "reading 2/2" in res.stderr
    assert "env_runner=1" in res.stdout and "2 process(es)" in res.stdout
