"""The HTML report's flame graph of the kept memory: laws of its boxes."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from memprobe.report._render_html import flame_graph

frame = st.sampled_from(["app.py:12", "numpy/_core/numeric.py:232", "json/decoder.py:353",
                         "leaky_alloc", "helper.py:8"])
stacks = st.lists(st.tuples(st.lists(frame, min_size=1, max_size=4).map("--".join),
                            st.integers(1, 1 << 30)), min_size=1, max_size=12)
BOX = re.compile(r"<div class='(\w+)' title='([^']*)' style='left:([\d.]+)%;"
                 r"width:([\d.]+)%;top:(\d+)px'>")


@settings(max_examples=100, deadline=None)
@given(stacks)
def test_each_row_spans_at_most_the_graph_and_the_first_row_all_of_it(data) -> None:
    page = flame_graph(data)
    boxes = [(cls, float(left), float(width), int(top)) for cls, _t, left, width, top
             in BOX.findall(page)]
    assert boxes
    rows: dict[int, float] = {}
    for _cls, left, width, top in boxes:
        assert 0 <= left and left + width <= 100.01
        rows[top] = rows.get(top, 0.0) + width
    assert abs(rows[0] - 100.0) < 0.01  # the first frames hold everything
    assert all(w <= 100.01 for w in rows.values())
    widths = [rows[t] for t in sorted(rows)]  # a row holds no more than the one above it
    assert all(b <= a + 0.01 for a, b in zip(widths, widths[1:])), widths


def test_user_library_and_c_frames_are_told_apart() -> None:
    page = flame_graph([("app.py:12--numpy/_core/numeric.py:232--leaky_alloc", 4096.0)])
    classes = [m[0] for m in BOX.findall(page)]
    assert classes == ["user", "lib", "c"]
    assert flame_graph([]) == ""
