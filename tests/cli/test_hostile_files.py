"""Second round of hostile and careless files (issue 27): never write into the user's
files, never lose the report to one bad line. docs/faults.md ("Hostile files and paths,
second round") lists each case with its test here. The ``memprobe`` console script is run
as installed (it resolves ``-m`` differently from ``python -m memprobe``)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

SCRIPT = str(Path(sys.executable).with_name("memprobe"))


def memprobe(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def line(i: int, **extra: object) -> str:
    rec = {"time": 1000.0 + i, "step": i, "pid": 7,
           "values": {"memprobe/process/rss_bytes": 1000 + i}, **extra}
    return json.dumps(rec)


def write_run(path: Path, n: int = 30, **extra: object) -> Path:
    path.write_text("".join(line(i, **extra) + "\n" for i in range(n)))
    return path


def samples_in(path: Path) -> int:
    return sum(1 for x in path.read_text().splitlines() if x.startswith("{"))


# -- writing into the user's files ---------------------------------------------------------
def test_1_console_script_refuses_to_overwrite_a_module_or_a_directorys_main(
        tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").touch()
    (tmp_path / "pkg" / "mod.py").write_text("print(1)\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text("print(2)\n")
    res = memprobe("run", "-o", "pkg/mod.py", "-m", "pkg.mod", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr == ("memprobe: error: pkg/mod.py: -o is the same file as the program "
                          "being run; refusing to overwrite it\n")
    res = memprobe("run", "-o", "app/__main__.py", "app", cwd=tmp_path)
    assert res.returncode == 2 and "same file as the program being run" in res.stderr
    assert (tmp_path / "pkg" / "mod.py").read_text() == "print(1)\n"
    assert (tmp_path / "app" / "__main__.py").read_text() == "print(2)\n"
    assert sorted(os.listdir(tmp_path)) == ["app", "pkg"]


def test_2_a_program_that_changes_directory_does_not_move_the_output(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("print(1)\n")
    (tmp_path / "chd.py").write_text('import os\nos.chdir("pkg")\n')
    res = memprobe("run", "-o", "mod.py", "chd.py", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "pkg" / "mod.py").read_text() == "print(1)\n"
    assert samples_in(tmp_path / "mod.py") == 2
    assert "written to mod.py" in res.stderr


FD_REUSE = """\
import os, time
os.closerange(3, 4096)
fds = [os.open(f"data{i}.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND) for i in range(8)]
time.sleep(0.4)
"""


def test_3_samples_never_go_into_the_programs_files_after_it_reuses_fds(
        tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text(FD_REUSE)
    res = memprobe("run", "--interval", "0.01", "-o", "out.jsonl", "p.py", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    for i in range(8):
        assert (tmp_path / f"data{i}.txt").read_bytes() == b""
    # the sink noticed, said so naming its file, and went on in its own file
    assert "was closed or reused by the program" in res.stderr
    assert ".out.jsonl." in res.stderr
    assert samples_in(tmp_path / "out.jsonl") >= 10
    # the process probe noticed too: one sample dropped, the next ones right
    rss = [json.loads(x)["values"].get("memprobe/process/rss_bytes")
           for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert rss[-1] is not None and rss[-1] > 1_000_000
    assert sum(v is None for v in rss) <= 1
    assert "closed or reused the file descriptors the probe kept on /proc" in res.stderr


def test_4_two_runs_of_the_same_output_at_once_the_second_is_refused(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text("import time\ntime.sleep(3)\n")
    (tmp_path / "fast.py").write_text("pass\n")
    first = subprocess.Popen([SCRIPT, "run", "-o", "same.jsonl", "slow.py"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not any(n.endswith(".tmp") for n in os.listdir(tmp_path)):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        res = memprobe("run", "-o", "same.jsonl", "fast.py", cwd=tmp_path)
        assert res.returncode == 2
        assert res.stderr.startswith("memprobe: error: same.jsonl: another memprobe command "
                                     "is writing it now (into .same.jsonl.")
    finally:
        out, err = first.communicate(timeout=30)
    assert first.returncode == 0, err
    assert samples_in(tmp_path / "same.jsonl") >= 3
    # after the first ended, the same output is free again
    res = memprobe("run", "-o", "same.jsonl", "fast.py", cwd=tmp_path)
    assert res.returncode == 0, res.stderr


def test_4_a_temporary_file_left_by_a_killed_run_does_not_block(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text("pass\n")
    stale = tmp_path / ".same.jsonl.abcd1234.tmp"  # what SIGKILL leaves: no lock held
    stale.write_text(line(0) + "\n")
    res = memprobe("run", "-o", "same.jsonl", "p.py", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert samples_in(tmp_path / "same.jsonl") == 2
    assert stale.read_text() == line(0) + "\n"  # not ours: left as it is


@pytest.mark.parametrize("command", ["run", "html"])
def test_5_a_replaced_output_keeps_its_mode(tmp_path: Path, command: str) -> None:
    write_run(tmp_path / "a.jsonl")
    (tmp_path / "p.py").write_text("pass\n")
    out = tmp_path / "out"
    out.write_text("old")
    out.chmod(0o600)
    args = (["run", "-o", "out", "p.py"] if command == "run"
            else ["report", "a.jsonl", "--html", "out"])
    res = memprobe(*args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert out.read_text() != "old"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_6_program_deletes_the_temporary_file_exit_code_kept_samples_recovered(
        tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text(textwrap.dedent("""\
        import glob, os, time
        time.sleep(0.05)
        for f in glob.glob(".out.jsonl.*.tmp"):
            os.unlink(f)
        time.sleep(0.05)
        raise SystemExit(3)
        """))
    res = memprobe("run", "--interval", "0.01", "-o", "out.jsonl", "p.py", cwd=tmp_path)
    assert res.returncode == 3, res.stderr
    assert "error" not in res.stderr
    assert samples_in(tmp_path / "out.jsonl") >= 3
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl", "p.py"]


def test_6_program_makes_the_output_a_directory_the_samples_are_kept_aside(
        tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text('import os\nos.mkdir("out.jsonl")\nraise SystemExit(4)\n')
    res = memprobe("run", "-o", "out.jsonl", "p.py", cwd=tmp_path)
    assert res.returncode == 4
    kept = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert len(kept) == 1
    assert (f"memprobe: warning: out.jsonl could not be written (Is a directory); the "
            f"samples are kept in {tmp_path / kept[0]}") in res.stderr
    assert samples_in(tmp_path / kept[0]) == 2


def test_7_a_long_output_name_is_written(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text("pass\n")
    name = "a" * 250
    res = memprobe("run", "-o", name, "p.py", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert samples_in(tmp_path / name) == 2
    assert sorted(os.listdir(tmp_path)) == sorted([name, "p.py"])


def test_8_the_closing_hint_is_shell_quoted(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text("pass\n")
    res = memprobe("run", "-o", "x y;touch PWNED.jsonl", "p.py", cwd=tmp_path)
    assert res.returncode == 0
    assert "see `memprobe report 'x y;touch PWNED.jsonl'`" in res.stderr


# -- losing the report to one bad line or file ---------------------------------------------
def test_9_a_huge_step_is_one_bad_line(tmp_path: Path) -> None:
    write_run(tmp_path / "a.jsonl")
    with open(tmp_path / "a.jsonl", "a") as f:
        f.write('{"time": 2000, "step": 1' + "0" * 310 + ', "pid": 7, "values": {}}\n')
    write_run(tmp_path / "b.jsonl", pid=8)
    res = memprobe("report", "a.jsonl", "b.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "a.jsonl:31: bad line skipped ('step' is too large" in res.stderr
    assert "== pid 7" in res.stdout and "== pid 8" in res.stdout
    assert "Traceback" not in res.stderr


def test_10_lone_surrogates_and_non_utf8_names_are_shown_escaped(tmp_path: Path) -> None:
    (tmp_path / "s.jsonl").write_text("".join(
        line(i).replace('"pid"', '"role": "\\udc00", "pid"') + "\n" for i in range(30)))
    res = memprobe("report", "s.jsonl", "--html", "s.html", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "role=\\udc00" in res.stdout
    bad_name = os.fsencode(tmp_path) + b"/\xff.jsonl"
    with open(bad_name, "wb") as f:
        f.write((tmp_path / "s.jsonl").read_bytes())
    res = subprocess.run([SCRIPT, "report", b"\xff.jsonl", "--html", "o.html"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "\\udcff" in (tmp_path / "o.html").read_text()


def test_11_a_sparse_terabyte_with_no_newline_is_given_up_quickly(tmp_path: Path) -> None:
    write_run(tmp_path / "a.jsonl")
    with open(tmp_path / "a.jsonl", "r+b") as f:
        f.truncate(2**40)
    t0 = time.monotonic()
    res = memprobe("report", "a.jsonl", cwd=tmp_path, timeout=120)
    assert time.monotonic() - t0 < 60
    assert res.returncode == 0, res.stderr
    assert "a.jsonl:31: reading stopped (no newline in 272 MiB); the lines before are kept" \
        in res.stderr
    assert "30 samples" in res.stdout


def test_11_the_bytes_read_from_one_file_are_capped(tmp_path: Path, monkeypatch) -> None:
    from memprobe.report import _jsonl

    monkeypatch.setattr(_jsonl, "MAX_READ_BYTES", 2000)
    write_run(tmp_path / "a.jsonl", n=100)
    with pytest.warns(Warning, match=r"reading stopped \(0 GiB read"):
        got = _jsonl.read_samples(tmp_path / "a.jsonl")
    assert 10 < len(got) < 100


def test_12_a_million_bad_lines_cost_ten_warnings_and_bounded_memory(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(line(0) + "\n" + "x\n" * 1_000_000)
    # a fresh parent whose one child is the command: its children's max rss is the command's
    measure = ("import resource, subprocess, sys\n"
               "code = subprocess.run(sys.argv[1:]).returncode\n"
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
               "sys.exit(code)\n")
    res = subprocess.run([sys.executable, "-c", measure, SCRIPT, "report", "a.jsonl"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    err = res.stderr.splitlines()
    assert sum("bad line skipped" in x for x in err) == 10
    assert "memprobe: warning: a.jsonl: and 999,990 more bad lines skipped" in err
    assert int(err[-1]) < 150_000  # max rss in KiB: the interpreter and memprobe, not the lines


def test_13_a_file_that_grows_while_it_is_read_is_read_to_its_size_at_open(
        tmp_path: Path) -> None:
    path = write_run(tmp_path / "a.jsonl")
    stop = threading.Event()

    def grow() -> None:
        with open(path, "a") as f:
            i = 30
            while not stop.is_set():
                f.write(line(i) + "\n")
                i += 1

    t = threading.Thread(target=grow)
    t.start()
    try:
        res = memprobe("report", "a.jsonl", cwd=tmp_path, timeout=60)
    finally:
        stop.set()
        t.join()
    assert res.returncode == 0, res.stderr


def test_13_the_reader_stops_at_the_size_at_open(tmp_path: Path) -> None:
    from memprobe.report._jsonl import iter_records

    path = write_run(tmp_path / "a.jsonl", n=5)
    it = iter_records(path)
    first = next(it)
    with open(path, "a") as f:
        f.write("".join(line(i) + "\n" for i in range(5, 50_000)))
    assert first.lineno == 1 and len(list(it)) == 4


def test_14_the_same_file_twice_is_read_once(tmp_path: Path) -> None:
    write_run(tmp_path / "a.jsonl")
    os.link(tmp_path / "a.jsonl", tmp_path / "hard.jsonl")
    res = memprobe("report", "a.jsonl", "./a.jsonl", "hard.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "30 samples" in res.stdout
    assert ("memprobe: warning: ./a.jsonl: the same file as a.jsonl (a second name or a "
            "hard link); read once") in res.stderr
    assert "hard.jsonl: the same file as a.jsonl" in res.stderr


def test_15_times_that_span_more_than_a_float_are_refused_per_run(tmp_path: Path) -> None:
    (tmp_path / "big.jsonl").write_text("".join(
        line(i, time=1.7e308 * (-1) ** i) + "\n" for i in range(52)))
    write_run(tmp_path / "good.jsonl", pid=8)
    res = memprobe("report", "big.jsonl", "good.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "big.jsonl: pid 7: its times span more than a float holds" in res.stderr
    assert "inf" not in res.stdout and "== pid 8" in res.stdout


def test_15_times_5e_324_apart_give_no_infinite_rate(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text("".join(
        json.dumps({"time": i * 5e-324, "step": i, "pid": 7,
                    "values": {"memprobe/process/rss_bytes": 1000 + 10**6 * i}}) + "\n"
        for i in range(60)))
    res = memprobe("report", "t.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "inf" not in res.stdout and "LEAK" in res.stdout


# -- crashes and silent failures -------------------------------------------------------------
@pytest.mark.parametrize("interval", ["1e10", "1e308", "86401"])
def test_16_an_interval_too_long_is_refused_with_the_largest(tmp_path: Path,
                                                              interval: str) -> None:
    (tmp_path / "p.py").write_text("pass\n")
    res = memprobe("run", "--interval", interval, "p.py", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.startswith("memprobe: error: --interval: must be a number of seconds "
                                 "from 0.001 to 86400, got ")
    assert os.listdir(tmp_path) == ["p.py"]


def test_17_probes_repeat_is_capped(tmp_path: Path) -> None:
    res = memprobe("probes", "--repeat", "100000000", cwd=tmp_path, timeout=30)
    assert res.returncode == 2
    assert res.stderr == ("memprobe: error: --repeat: must be from 1 to 10,000, "
                          "got 100000000\n")
