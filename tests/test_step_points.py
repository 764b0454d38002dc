"""The rises a growth is made of are counted at one resolution, whatever ``max_points``:
the RLlib adapter's live alarm judges on 40 points, ``memprobe report`` on 80, and a
healthy Ray EnvRunner's resident size (two steps, then a creep of small allocator
steps: +10.2 MiB over 390 s) read "grew in 3 steps" live and LEAK in the report
(issue 24)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

import memprobe

MIB = 1 << 20


def _steps_and_creep(seed: int, n: int = 900) -> tuple[list[int], list[float]]:
    """A healthy process's resident size as the EnvRunner's read: a step of 1 MiB early,
    one of 2.5 MiB late, a creep of 20 allocator steps of 96 KiB at random samples, and
    a page of noise."""
    rnd = random.Random(seed)
    creep = set(rnd.sample(range(40, n), 20))
    ys, y = [], 500.0 * MIB
    for x in range(n):
        y += MIB if x == 20 else 2.5 * MIB if x == 620 else 96 * 1024 if x in creep else 0
        ys.append(y + rnd.choice((0, 0, 4096, -4096)))
    return list(range(n)), ys


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6))
def test_the_live_alarms_points_and_the_reports_count_the_same_rises(seed: int) -> None:
    xs, ys = _steps_and_creep(seed)
    live, report = (memprobe.analyze(xs, ys, min_growth=2.5 * MIB, max_points=m,
                                     key="process/rss_bytes") for m in (40, 80))
    if {live.status, report.status} <= {"leak", "slight"}:
        assert live.status == report.status, (live.describe(), report.describe())
        assert live.note == report.note


def test_a_creep_in_small_steps_beside_two_large_ones_is_slight_in_the_report() -> None:
    """Seed 4 of the shape (found by the law above): LEAK at 80 points before."""
    xs, ys = _steps_and_creep(4)
    v = memprobe.analyze(xs, ys, min_growth=2.5 * MIB, key="process/rss_bytes")
    assert v.status == "slight" and v.note.startswith("grew in "), v.describe()
