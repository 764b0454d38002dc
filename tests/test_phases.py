"""Phase markers: marks and spans on a real Prober, in its JSONL, in `memprobe report`
and on the plot."""

from __future__ import annotations

import json
import mmap

import pytest
from hypothesis import given
from hypothesis import strategies as st

import memprobe
from memprobe.cli import main
from memprobe.report._jsonl import iter_records, read_samples
from memprobe.report._phase_growth import mark_times, phase_growth
from memprobe.report._runs import load_runs, summarize

MiB = 1 << 20
RSS = "memprobe/process/rss_bytes"
HELD: list[mmap.mmap] = []


@pytest.fixture(autouse=True)
def _clear():
    yield
    for buf in HELD:
        buf.close()
    HELD.clear()


def _touched(n: int) -> mmap.mmap:
    """``n`` bytes of new anonymous memory, every page touched: rss grows by ``n``
    whatever freed memory the allocator holds (earlier tests' included)."""
    buf = mmap.mmap(-1, n)
    for i in range(0, n, mmap.PAGESIZE):
        buf[i] = 1
    return buf


def _run(path, iterations: int = 6) -> memprobe.Prober:
    """Train steps that keep nothing, an eval span that keeps 4 MiB each time, a mark
    after each iteration."""
    prober = memprobe.Prober(probes=["process", "gc"], sink=str(path), load_entrypoints=False)
    step = 0
    with prober:
        for _ in range(iterations):
            with prober.phase("train"):
                for _ in range(5):
                    tmp = [str(i) for i in range(1000)]
                    del tmp
                    prober.sample(step)
                    step += 1
            with prober.phase("eval"):
                HELD.append(_touched(4 * MiB))
                prober.sample(step)
                step += 1
            prober.mark("checkpoint")
    return prober


def test_labels_are_fields_of_the_line_and_come_back(tmp_path):
    path = tmp_path / "run.jsonl"
    prober = _run(path, iterations=2)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["phase"] == "train" and lines[0]["phase_edge"] == "start"
    assert {ln.get("phase") for ln in lines} == {"train", "eval", None}
    assert sum(1 for ln in lines if ln.get("mark") == "checkpoint") == 2
    inside = [ln for ln in lines if ln.get("phase") == "eval" and "phase_edge" not in ln]
    assert len(inside) == 2
    # The reader keeps them as labels, not tags: one run, not one per phase.
    records = list(iter_records(path))
    assert all(r.tags == {} for r in records)
    assert [r.sample.labels for r in records[:2]] == [
        {"phase": "train", "phase_edge": "start"}, {"phase": "train"}]
    assert len(load_runs([str(path)])) == 1
    assert [(m.label, m.kind) for m in prober.marks][:3] == [
        ("train", "start"), ("train", "end"), ("eval", "start")]


def test_growth_per_phase_puts_the_growth_in_the_phase_that_made_it(tmp_path):
    path = tmp_path / "run.jsonl"
    _run(path)
    samples = read_samples(path)
    growth = {g.label: g for g in phase_growth(samples, [RSS])}
    assert set(growth) == {"train", "eval", ""}
    assert growth["eval"].spans == growth["train"].spans == 6
    # eval kept 6 x 4 MiB; train's MiB buffers were freed each step.
    assert growth["eval"].growth[RSS] >= 6 * 4 * MiB * 0.9, growth
    assert abs(growth["train"].growth[RSS]) < 4 * MiB, growth
    total = sum(g.growth[RSS] for g in growth.values())
    assert total == samples[-1].values[RSS] - samples[0].values[RSS]
    marks, spans = mark_times(samples)
    assert [label for _, label in marks] == ["checkpoint"] * 6
    assert [label for _, _, label in spans] == ["train", "eval"] * 6
    assert all(t0 <= t1 for t0, t1, _ in spans)


def test_nested_spans_count_in_the_innermost(tmp_path):
    path = tmp_path / "run.jsonl"
    with memprobe.Prober(probes=["process"], sink=str(path), load_entrypoints=False) as p:
        p.sample(0)
        with p.phase("train"):
            p.sample(1)
            with p.phase("eval"):
                assert p.current_phase == "train/eval"
                HELD.append(_touched(8 * MiB))
                p.sample(2)
            p.sample(3)
        assert p.current_phase is None
    growth = {g.label: g for g in phase_growth(read_samples(path), [RSS])}
    assert growth["train/eval"].spans == 1
    assert growth["train/eval"].growth[RSS] >= 7 * MiB
    assert abs(growth["train"].growth[RSS]) < 4 * MiB


def test_a_span_ends_when_its_body_raises(tmp_path):
    path = tmp_path / "run.jsonl"
    with memprobe.Prober(probes=["gc"], sink=str(path), load_entrypoints=False) as p:
        with pytest.raises(ZeroDivisionError), p.phase("eval"):
            raise ZeroDivisionError
        p.sample(1)
    labels = [s.labels for s in read_samples(path)]
    assert labels == [{"phase": "eval", "phase_edge": "start"},
                      {"phase": "eval", "phase_edge": "end"}, None]


@pytest.mark.parametrize("label, match", [
    ("", "non-empty str"), (3, "non-empty str"), ("a/b", "must not contain '/'"),
    ("x" * 201, "at most 200"),
])
def test_bad_label_is_named(label, match):
    with memprobe.Prober(probes=["gc"], load_entrypoints=False) as p:
        with pytest.raises(memprobe.ConfigError, match=f"label: .*{match}"):
            p.mark(label)
        with pytest.raises(memprobe.ConfigError, match=match), p.phase(label):
            pass
        assert p.current_phase is None


def test_report_shows_growth_per_phase(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    _run(path)
    html = tmp_path / "r.html"
    png = tmp_path / "r.png"
    assert main(["report", str(path), "--html", str(html), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "growth per phase:" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[out.splitlines().index(
        "  growth per phase:") + 3:] if line.startswith("  ") and not line.startswith("  hint")}
    assert rows["eval"][1] == "6" and rows["train"][1] == "6" and "(outside)" in rows
    assert rows["eval"][3].startswith("+2") and "MiB" in rows["eval"][4], rows["eval"]
    page = html.read_text()
    assert "<h3>growth per phase</h3>" in page and "<td>eval</td>" in page
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_draws_spans_and_marks(tmp_path):
    pytest.importorskip("matplotlib")
    from memprobe.report._render_png import figure, pyplot

    path = tmp_path / "run.jsonl"
    _run(path, iterations=3)
    summary = summarize(load_runs([str(path)])[0])
    plt = pyplot()
    fig = figure(plt, [summary])
    try:
        ax = fig.axes[0]
        bands = [p for p in ax.patches if type(p).__name__ in ("Polygon", "Rectangle")]
        assert len(bands) == 6  # 3 train + 3 eval spans
        dashed = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
        assert len(dashed) == 3
        texts = {t.get_text() for t in ax.texts}
        assert {"train", "eval", "checkpoint"} <= texts
        assert "phases" in fig._suptitle.get_text()
    finally:
        plt.close(fig)


@given(st.lists(st.tuples(
    st.integers(-10**6, 10**6), st.sampled_from([None, "a", "a/b", "c"]),
    st.sampled_from([None, "start", "end"]), st.sampled_from([None, "m"])),
    min_size=1, max_size=40))
def test_growth_per_phase_adds_up_to_the_whole_growth(rows):
    """Whatever the labels (even edges that do not pair up), every change between two
    samples counts in exactly one phase: the phases' growth and seconds add up."""
    samples = []
    for i, (v, phase, edge, mark) in enumerate(rows):
        labels = {k: x for k, x in (("phase", phase), ("phase_edge", edge and phase and edge),
                                    ("mark", mark)) if x}
        samples.append(memprobe.Sample(float(i), i, 1, {RSS: v}, labels or None))
    phases = phase_growth(samples, [RSS])
    if not any(phase for _, phase, _, _ in rows):
        assert phases == []
        return
    assert sum(g.growth.get(RSS, 0) for g in phases) == rows[-1][0] - rows[0][0]
    assert sum(g.seconds for g in phases) == len(rows) - 1
    assert sum(g.spans for g in phases) == sum(1 for _, p, e, _ in rows if p and e == "start")


def test_start_and_end_phase_span_two_callbacks(tmp_path):
    """What an RLlib adapter does: on_evaluate_start opens, on_evaluate_end closes."""
    path = tmp_path / "run.jsonl"
    with memprobe.Prober(probes=["gc"], sink=str(path), load_entrypoints=False) as p:
        p.sample(1)
        start = p.start_phase("evaluate", step=1)
        p.sample(2)
        with pytest.raises(memprobe.ConfigError, match="innermost open phase is 'evaluate'"):
            p.end_phase("train")
        end = p.end_phase("evaluate", step=2)
        with pytest.raises(memprobe.ConfigError, match="no phase is open"):
            p.end_phase()
        p.mark("checkpoint_loaded", step=2)
    assert (start.kind, end.kind, start.step, end.step) == ("start", "end", 1, 2)
    marks, spans = mark_times(read_samples(path))
    assert [label for _, _, label in spans] == ["evaluate"]
    assert [label for _, label in marks] == ["checkpoint_loaded"]


def test_labels_reach_a_jsonl_sink_object_with_tags(tmp_path):
    # A JsonlSink given as an object (as memprobe_rllib gives one, with tags) writes
    # the labels of a phase's samples too, not only a path given as sink=.
    path = tmp_path / "s.jsonl"
    with memprobe.Prober(["gc"], sink=memprobe.JsonlSink(str(path), tags={"role": "x"})) as p:
        with p.phase("eval", step=0):
            p.sample(step=1)
        p.mark("done")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r.get("phase"), r.get("phase_edge"), r.get("mark")) for r in lines] == [
        ("eval", "start", None), ("eval", None, None), ("eval", "end", None),
        (None, None, "done")]
    assert all(r["role"] == "x" for r in lines)
