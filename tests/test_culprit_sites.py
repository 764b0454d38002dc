"""Regression tests for issue 24: by default a Prober's tracemalloc probe, its report and
``memprobe report`` name the user's line first when a library allocated what the
user keeps (numpy, the json and pickle decoders, a stdlib factory)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import memprobe
from memprobe import ConfigError

PROGRAMS = {
    # what the user's line keeps, made by a library: (module source, library prefix)
    "numpy": ("import numpy as np\nKEPT = []\ndef step():\n    KEPT.append(np.ones(4096))\n",
              "numpy/"),
    "json": ("import json\nKEPT = []\nDOC = json.dumps([f'item {i}' for i in range(300)])\n"
             "def step():\n    KEPT.append(json.loads(DOC))\n", "json/"),
    "etree": ("import xml.etree.ElementTree as ET\nKEPT = []\n"
              "DOC = '<r>' + '<i a=\"1\">x</i>' * 100 + '</r>'\n"
              "def step():\n    KEPT.append(ET.fromstring(DOC))\n", "xml/"),
}


RUNNER = """
import json, sys
import memprobe
mod = __import__(sys.argv[1])
probes = json.loads(sys.argv[3])
with memprobe.Prober(probes, load_entrypoints=False,
                     sink=memprobe.JsonlSink(sys.argv[2])) as prober:
    for i in range(80):
        mod.step()
        prober.sample(step=i)
    report = prober.report()
v = report.get("tracemalloc/filtered_bytes")
print(json.dumps({"culprits": report.culprits, "culprit": report.culprit,
                  "first": v.culprits[0] if v and v.culprits else None,
                  "note": v.note if v else ""}))
"""


def _run(tmp_path: Path, name: str, probes: object) -> tuple[dict, int, Path]:
    """The user's module ``user_<name>`` run under a Prober in a fresh interpreter (a
    process of its own, as a user runs it); the report's culprits, the keeping line."""
    import json

    src, _ = PROGRAMS[name]
    (tmp_path / f"user_{name}.py").write_text(src)
    (tmp_path / "runner.py").write_text(RUNNER)
    path = tmp_path / "run.jsonl"
    out = subprocess.run([sys.executable, "runner.py", f"user_{name}", str(path),
                          json.dumps(probes)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), src.count("\n"), path


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_prober_default_names_the_users_line_first(tmp_path: Path, name: str) -> None:
    pytest.importorskip("numpy")
    report, line, path = _run(tmp_path, name, ["process", "gc", "tracemalloc"])
    want = f"user_{name}.py:{line} → {PROGRAMS[name][1]}"
    assert report["culprits"] and report["culprits"][0].startswith(want), report
    assert report["culprit"] is not None and report["culprit"].startswith(want), report
    # memprobe report on the same samples
    out = subprocess.run([sys.executable, "-m", "memprobe", "report", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    assert want in out.stdout, out.stdout


def test_user_grouping_with_one_frame_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"tracemalloc\.nframe.*nframe >= 2"):
        memprobe.Prober({"tracemalloc": {"group_by": "user", "nframe": 1}},
                        load_entrypoints=False)
    # the allocating line alone stays available
    memprobe.Prober({"tracemalloc": {"group_by": "lineno", "nframe": 1}},
                    load_entrypoints=False)


def test_a_library_line_without_the_users_frame_says_so(tmp_path: Path) -> None:
    """Traced with 2 frames, ``json.loads`` keeps the user's line out of reach: the verdict
    names json's line and says why the user's is missing, never silently."""
    report, _line, _path = _run(tmp_path, "json",
                                {"process": {}, "tracemalloc": {"nframe": 2}})
    assert report["first"] and report["first"].startswith("json/"), report
    assert "no frame of the user's code among the frames traced" in report["note"], report


def test_a_python_leak_spread_over_sites_none_of_which_leaks_alone_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``re.compile`` results kept: the bytes are allocated at several lines of the re
    package. Over a floor of 100 kB the traced total leaks (about 130 kB) while its
    largest site grows about 76 kB: the sites growing slightly are the culprits,
    the user's line first (there were none)."""
    (tmp_path / "patterns_kept.py").write_text(
        "import re\nKEPT = []\ndef remember(i):\n"
        "    KEPT.append(re.compile(f'(?P<a{i}>x+){i}[a-z]{{{i % 7}}}y'))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    import patterns_kept

    with memprobe.Prober(["process", "gc", "tracemalloc"], load_entrypoints=False) as prober:
        for i in range(300):
            patterns_kept.remember(i)
            prober.sample(step=i)
    report = prober.report(min_growth_fraction=0.0, min_growth_bytes=100_000)
    v = report.get("tracemalloc/filtered_bytes")
    assert v is not None and v.status == "leak", v
    assert not any(s.status == "leak" for s in report.sites), report.sites  # spread out
    assert v.culprits and v.culprits[0].startswith("patterns_kept.py:4 → re/"), v.culprits


def _fresh(tmp_path: Path, files: dict[str, str], main: str) -> dict:
    """Run ``main`` in a fresh interpreter in ``tmp_path`` (the floors scale with the
    process: a test session's heap and object count would hide a small program's leak);
    its last line of output, as JSON."""
    import json

    for name, src in files.items():
        (tmp_path / name).write_text(src)
    out = subprocess.run([sys.executable, "-c", main], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_way_to_the_kind_names_only_probes_that_did_not_run(tmp_path: Path) -> None:
    """numpy's arrays are not gc-tracked: with the objects probe beside process and gc,
    a kept array per step grows rss and no count of objects. The verdict says to add
    tracemalloc or malloc, and that the objects probe saw no growth; it said to add
    the objects probe, which ran."""
    pytest.importorskip("numpy")
    v = _fresh(tmp_path, {}, (
        "import json, memprobe, numpy as np\nkept = []\n"
        "with memprobe.Prober(['process', 'gc', 'objects'], load_entrypoints=False) as p:\n"
        "    for i in range(300):\n        kept.append(np.ones(2048))\n"
        "        p.sample(step=i)\n"
        "v = p.report().get('process/rss_bytes')\n"
        "print(json.dumps({'status': v.status, 'kind': v.kind, 'note': v.note}))\n"))
    assert v["status"] == "leak" and v["kind"] is None, v
    assert "add the tracemalloc or malloc probe" in v["note"], v
    assert "the objects probe saw no growth" in v["note"], v


def test_a_leaked_class_outside_the_most_numerous_types_is_named(tmp_path: Path) -> None:
    """A dataclass built by the user's factory module, one kept per step: 300 instances
    are never among the 10 most numerous types (functions, dicts, tuples), so its
    count had no series and the objects verdict named only ``list`` (the instances'
    field) or nothing (``io.BytesIO``). The types that grew most are counted too."""
    v = _fresh(tmp_path, {"factory_mod.py": (
        "import dataclasses, io\n@dataclasses.dataclass\nclass Record:\n"
        "    name: str\n    values: list\n"
        "def make(i):\n    return Record(f'r{i}', list(range(50)))\n"
        "def buffer():\n    return io.BytesIO(b'x' * 1024)\n")}, (
        "import json, memprobe, factory_mod\nkept = []\n"
        "with memprobe.Prober(['process', 'gc', 'objects'], load_entrypoints=False) as p:\n"
        "    for i in range(300):\n"
        "        kept.append((factory_mod.make(i), factory_mod.buffer()))\n"
        "        p.sample(step=i)\n"
        "v = p.report().get('objects/total_count')\n"
        "print(json.dumps({'status': v.status, 'kind': v.kind, 'culprits': v.culprits}))\n"))
    assert v["status"] == "leak" and v["kind"] == "objects", v
    assert "factory_mod.Record" in v["culprits"] and "_io.BytesIO" in v["culprits"], v
