"""What a key is: one registry of the probes' declarations (memprobe.describe_key)."""

from __future__ import annotations

import pytest

import memprobe
from memprobe import metrics
from memprobe._registry import builtin_declarations, growth_kinds, judged_metrics
from memprobe.leak._kinds import DEFAULT_METRICS, KINDS


def test_the_judged_metrics_are_the_probes_declarations() -> None:
    """What analyze_samples judges by default is what the built-in probes declare judged."""
    judged = set(judged_metrics(builtin_declarations()))
    assert judged == set(DEFAULT_METRICS)
    assert {"process/rss_bytes", "process/num_fds", "tracemalloc/filtered_bytes",
            "objects/total_count", "malloc/in_use_bytes"} <= judged
    assert "process/data_bytes" not in judged and "gc/gen0/count" not in judged


def test_each_growth_is_a_kind_in_words() -> None:
    assert set(KINDS) == set(metrics.GROWTHS) - {""}
    kinds = growth_kinds(builtin_declarations())
    assert kinds["process/num_fds"] == "fds"
    assert kinds["tracemalloc/filtered_bytes"] == "python"
    assert "process/rss_bytes" not in kinds  # the metrics beside it tell its kind


def test_a_plugin_declares_a_judged_metric_and_its_growth() -> None:
    decl = {"myprobe": {"handles_count": metrics.Metric("open handles", "count", judged=True,
                                                         growth="fds"),
                        "top/<site>/count": metrics.Metric("per site", "count", judged=True)}}
    assert judged_metrics(decl) == ("myprobe/handles_count",)  # patterns are never judged
    assert growth_kinds(decl) == {"myprobe/handles_count": "fds"}


def test_describe_key_answers_for_any_prefix() -> None:
    assert memprobe.describe_key("memprobe/driver/process/rss_bytes", "memprobe/driver").unit == (
        "bytes")
    assert memprobe.describe_key("x/gc/collection_seconds", "x").kind == "interval"
    assert memprobe.describe_key("memprobe/leak/hours_to_oom", "memprobe").unit == ""
    # a key outside the prefix, or of an unknown probe, gets the default declaration
    assert memprobe.describe_key("other/thing_bytes", "memprobe").unit == "bytes"


def test_a_verdict_carries_its_declared_unit() -> None:
    xs = list(range(40))
    v = memprobe.analyze(xs, [1000.0 * x for x in xs], key="memprobe/process/num_fds",
                         prefix="memprobe")
    assert v.unit == "count"
    assert "+1000 per sample" in v.describe()
    b = memprobe.analyze(xs, [1000.0 * x for x in xs], key="memprobe/process/rss_bytes",
                         prefix="memprobe")
    assert b.unit == "bytes" and "+1000 B per sample" in b.describe()


@pytest.mark.parametrize("bad", [{"growth": "leaky"}, {"judged": 1}])
def test_a_bad_declaration_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        metrics.Metric("x", "count", **bad)
