"""Every environment variable memprobe reads is checked like an option: a bad value is a
ConfigError naming the variable (issue 27, item 22). ``memprobe_ray.setup`` checks its
variables before it needs Ray, so no Ray is started here."""

from __future__ import annotations

import pytest

import memprobe
import memprobe_ray


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "-1", "0", "1e10", "1e400", "5s"])
def test_interval_variable_is_checked(monkeypatch, value: str) -> None:
    monkeypatch.setenv("MEMPROBE_RAY_INTERVAL_SECONDS", value)
    with pytest.raises(memprobe.ConfigError) as info:
        memprobe_ray.setup()
    assert info.value.option == "MEMPROBE_RAY_INTERVAL_SECONDS"
    assert str(info.value) == ("MEMPROBE_RAY_INTERVAL_SECONDS: must be a number of seconds "
                               f"from 0.001 to 86400, got {value!r}")


@pytest.mark.parametrize("value", ["of", "disable", "2"])
def test_hook_variable_is_checked(monkeypatch, value: str) -> None:
    monkeypatch.setenv("MEMPROBE_RAY_SETUP_HOOK", value)
    with pytest.raises(memprobe.ConfigError, match=r"MEMPROBE_RAY_SETUP_HOOK: must be 'off' "):
        memprobe_ray.setup()


@pytest.mark.parametrize("value", ["off", " OFF ", "0", "no", "false"])
def test_hook_variable_off_does_nothing(monkeypatch, value: str) -> None:
    monkeypatch.setenv("MEMPROBE_RAY_SETUP_HOOK", value)
    monkeypatch.setenv("MEMPROBE_RAY_INTERVAL_SECONDS", "abc")  # not read when off
    assert memprobe_ray.setup() is None
