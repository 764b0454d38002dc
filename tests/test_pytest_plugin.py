"""The memprobe_leak_check marker, run by pytester on real leaking and clean tests."""

from __future__ import annotations

pytest_plugins = ["pytester"]


def test_marker_fails_leaking_test_and_passes_clean_one(pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        CACHE = []

        @pytest.mark.memprobe_leak_check(repeats=25, max_growth_bytes=10_000, warmup=2)
        def test_leaks():
            CACHE.append(bytes(20_000))

        @pytest.mark.memprobe_leak_check(repeats=25, max_growth_bytes=10_000, warmup=2)
        def test_clean():
            data = [bytes(1000) for _ in range(50)]
            del data
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*LeakError*memory keeps growing*", "*test_marker*.py:6*"])
