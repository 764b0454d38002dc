"""A memory tool must not report its own memory as the user's: the objects memprobe
holds (a Prober's history, its alarm's tiers and cached verdicts, a capture's own
counts) are never a grown type, a sampled instance or a holder, whatever their type;
the same types leaked by the user still are."""

from __future__ import annotations

import array

import pytest

import memprobe
from memprobe._own import own_objects, own_type_counts
from memprobe.capture import CulpritCapture
from memprobe.probes.objects import ObjectsProbe

#: The user's leak, held at module level (the root a holders walk must name).
LEAKED: list[object] = []


@pytest.fixture(autouse=True)
def _clear():
    yield
    LEAKED.clear()


def _prober() -> memprobe.Prober:
    """A Prober whose first leak check (at sample 40) falls inside the capture below:
    the check makes its alarm's tiers, a few dozen ``array.array`` per judged metric,
    and caches its verdicts in tuples."""
    return memprobe.Prober(probes=["process", "gc"], on_leak=lambda v: None,
                           leak_check_every=10, load_entrypoints=False,
                           capture_on_leak=False)


def _warm_up() -> None:
    """What a process does once (imports, compiled flatten plans, psutil's classes) done
    before the capture, as in a run whose alarm fires after many checks."""
    with _prober() as prober:
        for step in range(60):
            LEAKED.append(bytearray(64 * 1024))  # growth: its checks forecast (psutil)
            prober.sample(step)
    LEAKED.clear()


def _capture_around(prober: memprobe.Prober, leak, samples: int = 120):
    capture = CulpritCapture(duration_seconds=60, native=False).start()
    try:
        for step in range(samples):
            leak()
            prober.sample(step)
        return capture.finish()
    finally:
        capture.abandon()


def test_memprobe_own_arrays_and_tuples_are_not_a_grown_type():
    """The user leaks bytearrays (not gc-tracked: no type of the user's grows) while a
    Prober's first check makes its tiers inside the capture. main named memprobe's
    ``array.array`` (+315), its lists' ``tuple`` and the capture's own
    ``Counter`` as grown types."""
    _warm_up()
    prober = _prober()
    with prober:
        culprits = _capture_around(prober, lambda: LEAKED.append(bytearray(1024)))
    assert prober.alarm is not None and prober.alarm.tiers.series, "no check ran in the window"
    assert culprits.types == (), culprits.types


_USER_ARRAYS = """
import array, json, sys
import memprobe
from memprobe.capture import CulpritCapture
from memprobe.referrers import referrer_chains

LEAKED = []

def prober():
    return memprobe.Prober(probes=["process", "gc"], on_leak=lambda v: None,
                           leak_check_every=10, load_entrypoints=False, capture_on_leak=False)

with prober() as warm:  # the imports and plans of a first run, before the capture
    for step in range(60):
        LEAKED.append(bytearray(64 * 1024))  # growth: its checks forecast (psutil)
        warm.sample(step)
LEAKED.clear()
p = prober()
with p:
    if sys.argv[1] == "capture":
        capture = CulpritCapture(duration_seconds=60, native=False).start()
        for step in range(120):
            LEAKED.append(array.array("d", [1.0] * 64))
            p.sample(step)
        c = capture.finish()
        out = {"types": c.types, "holders": [str(h) for h in c.holders]}
    else:
        for step in range(60):
            p.sample(step)
        LEAKED.extend(array.array("b", b"x") for _ in range(3))
        out = {"holders": [str(h) for h in referrer_chains(array.array, samples=2)]}
print(json.dumps(out))
"""


def _run_user_arrays(tmp_path, mode: str) -> dict:
    """In a fresh interpreter, where every ``array.array`` but the user's is memprobe's
    (in this process, libraries imported by the suite hold arrays of their own)."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "app.py"
    script.write_text(_USER_ARRAYS)
    proc = subprocess.run([sys.executable, str(script), mode], capture_output=True,
                          text=True, timeout=300, env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _held_by_leaked(chain: str) -> bool:
    """The chain goes up the user's list ``LEAKED`` (the script's module-level name, seen
    as a local of its running ``<module>`` frame), not through memprobe."""
    return (chain.startswith("array.array <- list[") and "'LEAKED'" in chain
            and "memprobe" not in chain)


def test_the_user_s_leaked_arrays_are_still_named_with_their_holder(tmp_path):
    """The user leaks one ``array.array`` per sample, in the same window as the Prober's
    tiers' arrays: the type is named with the user's count alone, and the holders walk
    samples the user's arrays (the module global), not memprobe's. main counted 435
    and walked the holders of memprobe's history."""
    out = _run_user_arrays(tmp_path, "capture")
    types = dict(out["types"])
    assert 120 <= types.get("array.array", 0) <= 122, out
    assert out["holders"], out
    for chain in out["holders"]:
        assert _held_by_leaked(chain), out


def test_referrer_chains_do_not_sample_memprobe_s_arrays(tmp_path):
    """The holders of ``array.array``, with a Prober alive whose history and tiers are
    arrays made before the user's: the sampled instances are the user's."""
    out = _run_user_arrays(tmp_path, "holders")
    assert len(out["holders"]) == 2, out
    for chain in out["holders"]:
        assert _held_by_leaked(chain), out


def test_objects_probe_does_not_count_memprobe_s_history():
    """The objects probe's growth between two samples leaves out what the Prober made
    in between (a new History's arrays), and still counts the user's arrays."""
    probe = ObjectsProbe(top=50)
    probe.sample()
    kept = memprobe.Prober(probes=["process"], history=64, load_entrypoints=False)
    mine = [array.array("q", [0]) for _ in range(7)]
    grown = probe.sample()["growth"]
    grown = {site: v["count"] for site, v in grown.items()}
    assert grown.get("array.array") == 7, grown
    del kept, mine


def test_own_objects_stop_at_the_user_s_callback():
    """A user's callback the Prober holds is reached, not walked into: the user's state
    behind it (here, a leak in the callback's instance) is not memprobe's."""

    class App:
        def __init__(self):
            self.cache = [array.array("d", [0.0]) for _ in range(10)]

        def on_leak(self, verdict):
            pass

    app = App()
    prober = memprobe.Prober(probes=["process"], on_leak=app.on_leak, load_entrypoints=False)
    own = own_objects()
    try:
        ids = {id(o) for o in own}
        assert id(prober) in ids and id(prober.history) in ids
        assert id(app) not in ids and id(app.cache) not in ids
        assert not any(id(a) in ids for a in app.cache)
    finally:
        own.clear()
    counts = own_type_counts()
    assert counts[array.array] >= 10
    del prober


def test_memprobe_ray_allocations_in_a_library_are_not_the_user_s():
    """Every memprobe package's allocation made in a library (the Ray integration's JSON
    through the stdlib) is memprobe's: left out of the user's sites. main left out
    memprobe's and memprobe_rllib's only, and named the Ray integration's line."""
    import json.decoder
    import os

    from memprobe._sitestats import user_site

    ray_file = os.path.join(os.path.dirname(os.path.dirname(memprobe.__file__)),
                            "memprobe_ray", "__init__.py")
    lib = (json.decoder.__file__, 7)
    assert user_site((lib, (ray_file, 12), ("/x/app/a.py", 1))) is None


def test_a_capture_describes_a_library_line_after_the_users_as_reports_do(
        tmp_path, monkeypatch) -> None:
    """A capture around the user's module keeping ``json.loads`` results: its text (the
    LeakWarning that follows an alarm's capture) reads ``kept_docs.py:5 → json/...``,
    as reports do, not the key form ``kept_docs.py:5--json/...``."""
    (tmp_path / "kept_docs.py").write_text(
        "import json\nKEPT = []\nDOC = json.dumps([f'item {i}' for i in range(300)])\n"
        "def step():\n    KEPT.append(json.loads(DOC))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    import kept_docs

    capture = CulpritCapture(duration_seconds=60, native=False).start()
    try:
        for _ in range(50):
            kept_docs.step()
        text = capture.finish().describe()
    finally:
        capture.abandon()
    first = text.splitlines()[0]
    assert first.startswith("python: kept_docs.py:5 → json/decoder.py:"), text
