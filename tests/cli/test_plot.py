"""The plot: its leak mark says when the growth began, and memprobe's own file and thread
get no panel; real matplotlib figures from real summaries of JSONL files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memprobe.report._render_png import growth_onset
from memprobe.report._runs import load_runs, summarize

MIB = 2**20


def _write(path: Path, rss: list[float], fds: list[int]) -> None:
    lines = [json.dumps({"time": 1000.0 + 0.1 * i, "step": i, "pid": 7, "values": {
        "memprobe/process/rss_bytes": r, "memprobe/process/num_fds": f,
        "memprobe/overhead/sample_seconds": 1e-5}}) for i, (r, f) in enumerate(zip(rss, fds))]
    path.write_text("\n".join(lines) + "\n")


def _figure(path: Path):  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    from memprobe.report._render_png import figure, pyplot

    plt = pyplot()
    return plt, figure(plt, [summarize(r) for r in load_runs([str(path)])])


def test_the_mark_is_where_the_growth_began_not_where_it_was_detected(tmp_path: Path) -> None:
    # flat at 100 MiB for 4 s (40 samples, small noise), then +1 MiB a sample for 6 s
    rss = [100 * MIB + (i % 3) * 4096 for i in range(40)]
    rss += [100 * MIB + (i + 1) * MIB for i in range(60)]
    _write(tmp_path / "late.jsonl", rss, [9] * 39 + [10] * 61)
    plt, fig = _figure(tmp_path / "late.jsonl")
    try:
        (rss_ax,) = [ax for ax in fig.axes if ax.get_ylabel() == "process/rss (MiB)"]
        (label,) = [t.get_text() for t in rss_ax.texts if t.get_text().startswith("growing")]
        began = float(label.split("growing from ")[1].split(" s")[0])
        assert 3.7 <= began <= 4.0, label
        marks = [line for line in rss_ax.lines if line.get_marker() == "v"]
        assert len(marks) == 1 and 3.7 <= marks[0].get_xdata()[0] <= 4.0
        # fds went 9 to 10 (memprobe's own file): not a leak, no panel
        assert [ax.get_ylabel() for ax in fig.axes] == ["process/rss (MiB)"]
    finally:
        plt.close(fig)


def test_a_leaking_count_gets_its_panel(tmp_path: Path) -> None:
    _write(tmp_path / "fds.jsonl", [100 * MIB] * 100, [9 + i // 2 for i in range(100)])
    plt, fig = _figure(tmp_path / "fds.jsonl")
    try:
        assert "process/num_fds" in [ax.get_ylabel() for ax in fig.axes]
    finally:
        plt.close(fig)


@given(st.integers(0, 200), st.integers(2, 200), st.floats(1, 1e9))
def test_onset_of_a_flat_then_linear_series(flat: int, rising: int, slope: float) -> None:
    ys = [5.0] * flat + [5.0 + slope * (i + 1) for i in range(rising)]
    onset = growth_onset(ys)
    assert max(0, flat - 1) <= onset <= flat + max(1, rising // 20)


def test_onset_of_series_that_do_not_rise() -> None:
    assert growth_onset([]) == growth_onset([3.0]) == growth_onset([3.0, 3.0, 2.0]) == 0
