"""``import memprobe_rllib`` where Ray, or its RLlib, cannot be imported: one clear ImportError.

Each case runs in a fresh interpreter of this environment whose ``sys.meta_path``
starts with a finder that refuses a package, as the import system does for a
package that is not installed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

BLOCK = textwrap.dedent("""
    import sys

    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name == {blocked!r} or name.startswith({blocked!r} + "."):
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Refuse())
    try:
        import memprobe_rllib
        {use}
    except ImportError as exc:
        print("ImportError:", exc.name, "|", exc, "|", exc.__cause__ is None)
    else:
        print("imported")
    print("ray imported:", "ray" in sys.modules)
""")


def _import_with(blocked: str, use: str = "pass") -> str:
    """The lines the import (and ``use``) print in a fresh interpreter that refuses ``blocked``."""
    proc = subprocess.run([sys.executable, "-c", BLOCK.format(blocked=blocked, use=use)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("blocked", ["ray", "ray.rllib"])
def test_import_without_ray_or_rllib_says_how_to_install(blocked):
    out = _import_with(blocked)
    lines = out.splitlines()
    assert lines[0].startswith(f"ImportError: {blocked} | "), out
    assert 'pip install "pymemprobe[rllib]"' in lines[0]
    assert f"{blocked} cannot be imported" in lines[0]
    assert lines[0].endswith("| True"), out  # one error, not one chained to a bare one
    assert lines[1] == "ray imported: False", out  # the check itself imports nothing


def test_import_with_rllib_imports_no_ray():
    pytest.importorskip("ray.rllib")
    out = _import_with("not_a_package_memprobe_uses")
    assert out.splitlines() == ["imported", "ray imported: False"], out


def test_rllib_without_one_of_its_dependencies_says_how_to_install():
    pytest.importorskip("ray.rllib")
    out = _import_with("gymnasium", use="memprobe_rllib.MemoryProbeCallback")
    first = out.splitlines()[0]
    assert first.startswith("ImportError: gymnasium | memprobe_rllib.MemoryProbeCallback needs"
                            " Ray RLlib and its dependencies"), out
    assert 'pip install "pymemprobe[rllib]"' in first
