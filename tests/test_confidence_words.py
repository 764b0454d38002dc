"""A verdict's text names the confidence its slope's interval was computed with, not
always 95%."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

import memprobe

LEAKED: list[bytearray] = []


def _leaky_prober() -> memprobe.Prober:
    prober = memprobe.Prober(probes=["tracemalloc"], load_entrypoints=False)
    with prober:
        for step in range(60):
            LEAKED.append(bytearray(4096))
            prober.sample(step)
    LEAKED.clear()
    return prober


def _interval(text: str, metric: str) -> tuple[str, str]:
    """The confidence words and the interval of ``metric``'s line."""
    line = next(ln for ln in text.splitlines() if metric + ":" in ln)
    m = re.search(r", ([0-9.]+%) interval ([^,]+),", line)
    assert m is not None, line
    return m.group(1), m.group(2)


def test_report_text_names_the_confidence_used():
    """A real traced leak judged at 80% and at 99.9%: each text says its own confidence
    (main printed "95% interval" for both)."""
    prober = _leaky_prober()
    metric = "tracemalloc/filtered_bytes"
    for confidence, words in ((0.8, "80%"), (0.999, "99.9%"), (0.95, "95%")):
        report = prober.report(confidence=confidence)
        said, _ = _interval(str(report), metric)
        assert said == words, str(report)
        assert report.verdicts[f"memprobe/{metric}"].confidence == confidence


@given(st.floats(min_value=1e-6, max_value=1 - 1e-9, allow_nan=False))
def test_confidence_words_read_back(confidence):
    """The words are the percentage: read back, they are the confidence (to 10 digits)."""
    from memprobe.leak._verdict import confidence_words

    text = confidence_words(confidence)
    assert text.endswith("%")
    assert abs(float(text[:-1]) / 100 - confidence) <= 1e-9 * max(1.0, confidence)
