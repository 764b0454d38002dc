"""Prometheus names from metric declarations (no Ray needed), and the missing-extra error."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from hypothesis import example, given
from hypothesis import strategies as st

import memprobe
from memprobe.keys import split_key
from memprobe.metrics import KINDS, UNITS, Metric
from memprobe_ray import dashboard, prom_metric

VALID = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
parts = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=20)
metrics = st.lists(parts, min_size=1, max_size=4).map("/".join)
declarations = st.builds(Metric, st.just(""), st.sampled_from(UNITS), st.sampled_from(KINDS))


@given(parts, metrics, declarations)
@example(":", "sum", Metric("", "count", "gauge"))  # the probe's name cleans away
@example("x", "total", Metric("", "count", "gauge"))
def test_names_are_valid_and_follow_the_conventions(probe, metric, declared):
    m = prom_metric(probe, metric, declared)
    assert VALID.match(m.name), m
    assert m.name.startswith("memprobe_")
    if m.kind == "counter":
        assert m.name.endswith("_total")
        assert declared.kind == "counter" or (declared.kind, declared.unit) == ("interval",
                                                                               "seconds")
    else:
        assert not m.name.endswith(("_count", "_sum", "_bucket", "_total")), m
    unit = {"bytes": "_bytes", "seconds": "_seconds", "fraction": "_ratio"}.get(declared.unit)
    if unit:
        assert m.name.removesuffix("_total").endswith(unit), m


@given(st.sampled_from(["a.py:1", "x/y.py:22", "builtins.dict"]), declarations)
def test_a_site_is_a_tag_never_part_of_the_name(site, declared):
    for section in ("top", "growth", "survivors"):
        m = prom_metric("tracemalloc", f"{section}/{site}/size_bytes", declared)
        assert m.site == site
        assert m.name == prom_metric("tracemalloc", f"{section}/other/size_bytes", declared).name


def test_the_default_probes_keys_have_distinct_unit_bearing_names():
    from memprobe_ray._sink import _Declarations

    describe = _Declarations()
    with memprobe.Prober(["process", "gc"]) as prober:
        describe.prober = prober
        values = prober.sample(step=0)
    names: dict[str, list[str]] = {}
    # overhead/fraction appears once measured over a second: named here all the same.
    for key in dict.fromkeys([*values, "memprobe/overhead/fraction"]):
        p = split_key(key, "memprobe")
        m = prom_metric(p.probe, p.metric, describe(key, "memprobe"))
        names.setdefault(m.name, []).append(key)
    assert "memprobe_process_rss_bytes" in names
    assert "memprobe_overhead_ratio" in names
    assert "memprobe_process_num_fds" in names
    assert "memprobe_overhead_sample_seconds_total" in names
    # gc's time per interval and its running total are one counter; the sink keeps the first.
    shared = {n: k for n, k in names.items() if len(k) > 1}
    assert shared == {"memprobe_gc_collection_seconds_total": [
        "memprobe/gc/collection_seconds", "memprobe/gc/collection_seconds_total"]}


def test_without_ray_default_a_one_line_error_names_the_extra():
    code = ("import sys; sys.modules['aiohttp'] = None\n"
            "import memprobe_ray\n"
            "memprobe_ray.RayMetricsSink()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("memprobe_ray._sink.RayMetricsUnavailable: ")
    assert 'pip install "pymemprobe[ray]"' in last and "aiohttp" in last


def test_the_dashboard_command_writes_the_dashboard(tmp_path, capsys):
    from memprobe.cli import main

    assert main(["grafana-dashboard"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == dashboard.dashboard_json()
    assert main(["grafana-dashboard", "-o", str(tmp_path / "d.json")]) == 0
    assert json.loads((tmp_path / "d.json").read_text()) == out
    titles = " ".join(p["title"] for p in out["panels"])
    for needed in ("rss", "Python bytes", "growing", "Leak suspects", "file descriptors",
                   "garbage collection", "overhead"):
        assert needed in titles
    for _, expr in dashboard.queries():
        assert "$" not in expr
