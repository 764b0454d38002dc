"""The fields of a JSONL line, for the writer (:class:`memprobe.JsonlSink`) and the readers.

A line is ``{"time": unix_seconds, "step": step, "pid": pid, ...tags, "values": {key:
value}}``, plus, on some samples, text fields that label the sample without splitting
runs: a mark, the phase a span opened (nested spans join their names with
:data:`PHASE_SEP`), a span's edge, and the referrer chains a leak capture found.
"""

from __future__ import annotations

__all__ = [
    "HOLDERS",
    "LABEL_FIELDS",
    "MARK",
    "MAX_KEY_CHARS",
    "MAX_LINE_BYTES",
    "PHASE",
    "PHASE_EDGE",
    "PHASE_SEP",
    "RECORD_FIELDS",
    "TEXT_FIELDS",
]

#: Fields of every line; a tag may not take one of these names.
RECORD_FIELDS = ("time", "step", "pid", "values")
#: ``"mark": "checkpoint"`` on the sample a mark took.
MARK = "mark"
#: ``"phase": "train/eval"`` on every sample inside a span.
PHASE = "phase"
#: ``"phase_edge": "start"`` or ``"end"`` on the samples a span's edges took.
PHASE_EDGE = "phase_edge"
#: What joins the names of nested spans in :data:`PHASE`.
PHASE_SEP = "/"
#: The fields that label a sample (not tags: they do not split runs).
LABEL_FIELDS = (MARK, PHASE, PHASE_EDGE)
#: The field of a capture's line that holds its referrer chains, one per line of text.
HOLDERS = "holders"
#: Fields of a line that go to ``Sample.labels`` when they are a str.
TEXT_FIELDS = (*LABEL_FIELDS, HOLDERS)

#: The longest line the reader reads (bytes, newline excluded); the writer never writes a
#: longer one (it drops the values of the probe whose keys make it too long).
MAX_LINE_BYTES = 16 * 2**20
#: The longest key the writer writes; a longer one is dropped, naming its probe.
MAX_KEY_CHARS = 8192
