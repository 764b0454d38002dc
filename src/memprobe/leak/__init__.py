"""Judging leaks: verdicts at every time scale, kinds of growth, the live alarm and its
capture, the forecast of out-of-memory."""
