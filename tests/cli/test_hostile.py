"""Hostile and careless files and paths (issue 19): never destroy an input, never hang,
never let a file drive the terminal. docs/faults.md ("Hostile files and paths") lists
each case with its test here."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

GOOD = {"time": 1000.0, "step": 0, "pid": 7, "role": "main",
        "values": {"memprobe/process/rss_bytes": 1000, "memprobe/overhead/sample_seconds": 1e-5}}


def memprobe(*args: str, cwd: Path, timeout: float = 60, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memprobe", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, **kw)


def good_lines(n: int = 30, **extra) -> list[str]:
    out = []
    for i in range(n):
        rec = {**GOOD, **extra, "time": 1000.0 + i, "step": i}
        rec["values"] = dict(GOOD["values"])
        out.append(json.dumps(rec))
    return out


def write_run(path: Path, n: int = 30, **extra) -> Path:
    path.write_text("\n".join(good_lines(n, **extra)) + "\n")
    return path


# -- 1-3: data loss ------------------------------------------------------------------------
def test_1_run_refuses_to_write_over_the_script(tmp_path: Path) -> None:
    src = "print('victim ran')\n"
    (tmp_path / "victim.py").write_text(src)
    res = memprobe("run", "-o", "victim.py", "victim.py", cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == ("memprobe: error: victim.py: -o is the same file as the program "
                          "being run; refusing to overwrite it\n")
    assert (tmp_path / "victim.py").read_text() == src
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(src)
    res = memprobe("run", "-o", "pkg/mod.py", "-m", "pkg.mod", cwd=tmp_path)
    assert res.returncode == 2 and "same file as the program being run" in res.stderr
    assert (tmp_path / "pkg" / "mod.py").read_text() == src
    assert sorted(os.listdir(tmp_path)) == ["pkg", "victim.py"]  # no temporary left behind


@pytest.mark.parametrize("option", ["--html", "--plot"])
def test_2_report_refuses_to_write_over_an_input(tmp_path: Path, option: str) -> None:
    run = write_run(tmp_path / "a.jsonl")
    before = run.read_bytes()
    os.link(run, tmp_path / "hard.jsonl")  # the same inode under another name
    for target in ("a.jsonl", "hard.jsonl", "./a.jsonl"):
        res = memprobe("report", "a.jsonl", option, target, cwd=tmp_path)
        assert res.returncode == 2, res.stderr
        assert f"{option} is the same file as the input; refusing to overwrite it" in res.stderr
        assert res.stdout == ""  # refused before anything is read or printed
    assert run.read_bytes() == before


def test_3_symlinked_output_is_refused_and_existing_file_replaced_whole(tmp_path: Path) -> None:
    write_run(tmp_path / "a.jsonl")
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    (tmp_path / "out.html").symlink_to(precious)
    res = memprobe("report", "a.jsonl", "--html", "out.html", cwd=tmp_path)
    assert res.returncode == 2 and "--html is a symbolic link" in res.stderr
    assert precious.read_text() == "keep me\n"
    (tmp_path / "out.html").unlink()
    (tmp_path / "out.html").write_text("old page")
    res = memprobe("report", "a.jsonl", "--html", "out.html", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out.html").read_text().startswith("<!doctype html>")
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_3_a_failed_run_leaves_the_old_output_whole(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("print('never')\n")
    keep = write_run(tmp_path / "keep.jsonl")
    before = keep.read_bytes()
    res = memprobe("run", "--probes", "process,tracemaloc", "-o", "keep.jsonl", "x.py",
                   cwd=tmp_path)
    assert res.returncode == 2 and "did you mean 'tracemalloc'" in res.stderr
    assert res.stdout == ""
    assert keep.read_bytes() == before
    # Killed in the middle: the old file is whole, the partial samples beside it.
    (tmp_path / "slow.py").write_text("import os, signal, time\ntime.sleep(0.3)\n"
                                      "os.kill(os.getpid(), signal.SIGKILL)\n")
    res = memprobe("run", "--interval", "0.01", "-o", "keep.jsonl", "slow.py", cwd=tmp_path)
    assert res.returncode == -signal.SIGKILL
    assert keep.read_bytes() == before


# -- 4-6: hangs and unbounded memory -------------------------------------------------------
def test_4_a_symlink_to_dev_zero_is_refused(tmp_path: Path) -> None:
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    res = memprobe("report", "zero.jsonl", cwd=tmp_path, timeout=20)
    assert res.returncode == 2
    assert res.stderr == ("memprobe: error: zero.jsonl: is a character device, not a regular "
                          "file; memprobe reads files only\n")


def test_5_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.jsonl")
    res = memprobe("report", "pipe.jsonl", cwd=tmp_path, timeout=20)
    assert res.returncode == 2
    assert "pipe.jsonl: is a FIFO, not a regular file" in res.stderr


READ_AND_MEASURE = textwrap.dedent(
    """\
    import sys, warnings
    import memprobe
    from memprobe.report._jsonl import read_samples

    def hwm_kib():  # peak rss of this process; ru_maxrss would carry the parent's over exec
        with open("/proc/self/status") as f:
            return next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))

    before = hwm_kib()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        samples = read_samples(sys.argv[1])
    grew = hwm_kib() - before
    print(len(samples), grew // 1024, "|".join(str(w.message) for w in caught))
    """
)


def test_6_a_huge_line_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    lines = good_lines(3)
    with open(path, "w") as f:
        f.write(lines[0] + "\n")
        big = {**GOOD, "blob": "x" * (200 * 2**20)}  # a 200 MB tag value
        f.write(json.dumps(big) + "\n")
        f.write(lines[1] + "\n" + lines[2] + "\n")
    res = subprocess.run([sys.executable, "-c", READ_AND_MEASURE, str(path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    n, grew_mib, warning = res.stdout.split(" ", 2)
    assert n == "3"
    assert int(grew_mib) < 60, f"reading a 200 MB line took {grew_mib} MiB"
    assert f"{path}:2: line longer than 16 MiB skipped" in warning


# -- 8: one bad line loses only itself -----------------------------------------------------
def test_8_a_deeply_nested_line_is_skipped_and_the_rest_kept(tmp_path: Path) -> None:
    lines = good_lines(25)
    lines.insert(3, '{"time": 1, "pid": 1, "values": {}, "deep": ' + "[" * 100_000
                 + "]" * 100_000 + "}")
    path = tmp_path / "deep.jsonl"
    path.write_text("\n".join(lines) + "\n")
    res = memprobe("report", "deep.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "deep.jsonl:4: bad line skipped (RecursionError" in res.stderr
    assert "25 samples" in res.stdout


# -- 11 and exit codes: the program's own, whatever it does ---------------------------------
HOSTILE_PROGRAMS = {
    "closes_fd2": "import os\nos.close(2)\nprint('out')\n",
    "closes_fd1": "import os\nos.close(1)\n",
    "closes_stdout": "import sys\nprint('x')\nsys.stdout.close()\n",
    "closes_fds_0_to_2_exit_4": "import os, sys\nfor fd in (0, 1, 2):\n    os.close(fd)\n"
                                "sys.exit(4)\n",
    "replaces_stderr_with_none": "import sys\nsys.stderr = None\nsys.exit(5)\n",
    "exit_string": "import sys\nsys.exit('bye')\n",
    "sigterm_itself": "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n",
    "ignores_sigint_exit_0": "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n",
    "keyboard_interrupt": "raise KeyboardInterrupt\n",
    "breaks_the_clock": "import time\ndef boom(*a):\n    raise RuntimeError('no clock')\n"
                        "time.time = time.perf_counter = time.monotonic = boom\n"
                        "import gc\nfor _ in range(3):\n    gc.collect()\n"
                        "raise SystemExit(6)\n",
    "os_exit_9": "import os\nos._exit(9)\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_PROGRAMS))
def test_11_exit_status_is_the_programs_own(tmp_path: Path, name: str) -> None:
    (tmp_path / "p.py").write_text(HOSTILE_PROGRAMS[name])
    plain = subprocess.run([sys.executable, "p.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    res = memprobe("run", "--interval", "0.005", "-o", "o.jsonl", "p.py", cwd=tmp_path)
    assert res.returncode == plain.returncode, (res.stderr, plain.stderr)
    assert "memprobe: error" not in res.stderr and "cli.py" not in res.stderr


def test_a_program_that_closes_stdout_keeps_its_last_sample(tmp_path: Path) -> None:
    (tmp_path / "in.json").write_text('{"b": 1, "a": 2}')
    res = memprobe("run", "-o", "m.jsonl", "-m", "json.tool", "--sort-keys", "in.json",
                   cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == '{\n    "a": 2,\n    "b": 1\n}\n'
    assert "Traceback" not in res.stderr
    lines = (tmp_path / "m.jsonl").read_text().splitlines()
    assert len(lines) >= 2 and json.loads(lines[-1])["command"] == "json.tool"


# -- 12: control characters never reach the terminal ---------------------------------------
def test_12_control_characters_are_escaped_everywhere(tmp_path: Path) -> None:
    evil = "\x1b[2J\x1b]52;c;ZXZpbA==\x07\r\u202e"
    lines = []
    for i in range(30):
        rec = {**GOOD, "time": 1000.0 + i, "step": i, "role": evil, "command": f"cmd{evil}"}
        rec["values"] = {**GOOD["values"],
                         f"memprobe/tracemalloc/top/x{evil}.py:1/size_bytes": 100 + i}
        lines.append(json.dumps(rec))
    lines.insert(5, "not json " + evil)
    name = f"run{evil}.jsonl".replace("\r", "")
    (tmp_path / name).write_text("\n".join(lines) + "\n")
    res = memprobe("report", name, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    for stream in (res.stdout, res.stderr):
        assert not any(ord(c) < 32 and c != "\n" for c in stream), repr(stream)
        assert "\u202e" not in stream
    assert "\\x1b[2J\\x1b]52;c;ZXZpbA==\\x07\\x0d\\u202e" in res.stdout
    assert "x\\x1b[2J" in res.stdout  # the site key
    assert "run\\x1b[2J" in res.stderr  # the file name in the warning


# -- smaller items -------------------------------------------------------------------------
def test_time_1e400_is_a_bad_line(tmp_path: Path) -> None:
    lines = good_lines(25)
    lines.insert(1, lines[1].replace('"time": 1001.0', '"time": 1e400'))
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    res = memprobe("report", "t.jsonl", cwd=tmp_path)
    assert "t.jsonl:2: bad line skipped ('time' is not a finite number: inf)" in res.stderr
    assert "nan" not in res.stdout and "25 samples over 24.0 s" in res.stdout


def test_huge_values_give_compact_rows(tmp_path: Path) -> None:
    lines = []
    for i in range(25):
        rec = {**GOOD, "time": 1000.0 + i, "step": i}
        rec["values"] = {**GOOD["values"], "memprobe/process/rss_bytes": 1e308 * (-1) ** i,
                         "memprobe/process/num_fds": -1e308}
        lines.append(json.dumps(rec))
    (tmp_path / "h.jsonl").write_text("\n".join(lines) + "\n")
    res = memprobe("report", "h.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert max(len(line) for line in res.stdout.splitlines()) < 140
    assert "1e+308 B" in res.stdout and "-1e+308" in res.stdout


def test_gzip_input_is_read(tmp_path: Path) -> None:
    data = ("\n".join(good_lines(25)) + "\n").encode()
    (tmp_path / "r.jsonl.gz").write_bytes(gzip.compress(data))
    (tmp_path / "named-plain.jsonl").write_bytes(gzip.compress(data))
    res = memprobe("report", "r.jsonl.gz", "named-plain.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stderr
    assert "50 samples" in res.stdout and "1 process(es)" in res.stdout  # same pid and tags


def test_cut_gzip_keeps_the_lines_before_the_cut(tmp_path: Path) -> None:
    data = gzip.compress(("\n".join(good_lines(200)) + "\n").encode())
    (tmp_path / "cut.jsonl.gz").write_bytes(data[: len(data) * 2 // 3])
    res = memprobe("report", "cut.jsonl.gz", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "reading stopped" in res.stderr and res.stderr.count("warning") <= 2


def test_non_jsonl_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "leak.png").write_bytes(bytes(range(256)) * 400)
    res = memprobe("report", "leak.png", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1
    assert res.stderr.startswith("memprobe: error: leak.png: not a memprobe JSONL file")


@pytest.mark.parametrize("interval", ["1e-9", "0", "-1", "nan", "inf"])
def test_interval_has_a_lower_limit(tmp_path: Path, interval: str) -> None:
    (tmp_path / "x.py").write_text("print('never')\n")
    res = memprobe("run", "--interval", interval, "x.py", cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert "--interval: must be a number of seconds from 0.001 to 86400, got " in res.stderr
    assert not (tmp_path / "memprobe.jsonl").exists()


def test_a_forked_child_neither_writes_nor_reports(tmp_path: Path) -> None:
    (tmp_path / "f.py").write_text(textwrap.dedent(
        """\
        import os, time
        pid = os.fork()
        time.sleep(0.2)
        if pid:
            os.waitpid(pid, 0)
            print("parent", flush=True)
        else:
            print("child", flush=True)
        """))
    res = memprobe("run", "--interval", "0.01", "-o", "f.jsonl", "f.py", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.split()) == ["child", "parent"]
    assert res.stderr.count("samples of") == 1
    recs = [json.loads(line) for line in (tmp_path / "f.jsonl").read_text().splitlines()]
    assert {r["pid"] for r in recs} == {recs[0]["pid"]}


def test_12_long_values_are_cut_with_an_ellipsis(tmp_path: Path) -> None:
    long_tag = "x" * 2**20  # 1 MiB: under the line cap, so the line is read
    write_run(tmp_path / "long.jsonl", role=long_tag, command="c" * 5000)
    res = memprobe("report", "long.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    heading = res.stdout.splitlines()[0]
    assert "…" in heading and len(heading) < 600
    assert max(len(line) for line in res.stdout.splitlines()) < 600


def test_an_output_that_cannot_be_written_is_named_before_the_program_runs(
        tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("print('ran')\n")
    res = memprobe("run", "-o", "/proc/x.jsonl", "x.py", cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == ""  # root can write anywhere but /proc
    assert res.stderr == (
        "memprobe: error: /proc/x.jsonl: cannot be written: No such file or directory\n")
