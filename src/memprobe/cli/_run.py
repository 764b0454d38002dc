"""``memprobe run``: a Python program run in this interpreter while a thread samples it.

The program's stdout, stderr and exit status are its own, whatever it does to
file descriptors 0-2, to ``sys.stdout``, to signals or to the clock: memprobe
never lets its own bookkeeping fail the run. Samples go to a temporary file
beside the output, renamed into place at the end (see :mod:`memprobe.cli._outputs`).
A process forked by the program neither samples nor writes into the file, nor
prints memprobe's closing line.
"""

from __future__ import annotations

import os
import runpy
import shlex
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Sequence
from typing import Any, TextIO

from .._errors import ConfigError, MemprobeError
from .._format import safe
from .._keptfd import identity, same_file
from .._sample import Sample
from ..engine._sinks import JsonlSink
from ._outputs import check_outputs, claim, commit, discard, path_identity, temp_beside
from ._probe_options import FLAG, parse_probe_options, refused_by_probe

PROG = "memprobe"
#: The shortest ``--interval``: 1000 samples per second at most.
MIN_INTERVAL_SECONDS = 0.001
#: The longest ``--interval``: a day (a thread's wait has a limit near 9.2e9 s).
MAX_INTERVAL_SECONDS = 86400.0
#: The fraction of wall time ``memprobe run``'s sampling may take by default
#: (``--budget``): the sampler works for at most a fifth of the run, so on an idle
#: machine the program runs at most 1.25x as long for it whatever a sample costs, and a
#: program of a few seconds whose samples cost milliseconds still gets enough samples for a
#: verdict and its culprit (docs/performance.md, memprobe run's cost).
DEFAULT_RUN_BUDGET = 0.2

#: The samples taken at ``--interval`` before the budget applies: what a verdict needs
#: (twice ``analyze_samples``' ``min_points``, with the warm-up judged). A program of a
#: few seconds whose samples cost a tenth of a second each still gets its verdict; a long
#: run pays the budget's share after its first seconds.
UNBUDGETED_SAMPLES = 40
#: The sampler's CPU time after which the budget applies, even before
#: :data:`UNBUDGETED_SAMPLES` were taken (40 samples of a tenth of a second, with room):
#: at a second a sample (the tracemalloc probe once torch is imported:
#: docs/performance.md), 40 samples at ``--interval`` would hold the program back for
#: most of its first minute.
UNBUDGETED_SECONDS = 5.0

# Bound at import: a program that patches ``time`` does not reach the sampler's own clock.
_thread_time = time.thread_time


class CliError(MemprobeError):
    """A command-line error: printed as one line, exit status 2."""


def say(stream: TextIO | None, text: str) -> None:
    """Print memprobe's own line; a closed or broken stream is not the program's failure."""
    try:
        if stream is not None and not stream.closed:
            print(text, file=stream, flush=True)
    except (OSError, ValueError):
        pass


class _RunJsonlSink(JsonlSink):
    """A JSONL sink whose faults are kept for ``memprobe run``'s own closing lines (a
    warning in the sampler thread would go through the program's warning filters)."""

    def __init__(self, path: str, tags: dict[str, Any]) -> None:
        super().__init__(path, tags=tags)
        self.faults: list[str] = []

    def _warn(self, message: str) -> None:
        self.faults.append(message.removeprefix("memprobe: "))


class OwnSink:
    """A :class:`memprobe.JsonlSink`, opened once every argument is checked, that writes
    only from the process that created it (not from a child the program forks)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.inner: Any = None

    def open(self, path: str, tags: dict[str, Any]) -> None:
        self.inner = _RunJsonlSink(path, tags)

    @property
    def faults(self) -> list[str]:
        return self.inner.faults if self.inner is not None else []

    def write(self, sample: Sample) -> None:
        if self.inner is not None and os.getpid() == self.pid:
            self.inner.write(sample)

    def close(self) -> None:
        if self.inner is not None and os.getpid() == self.pid:
            self.inner.close()


class Sampler:
    """Samples a Prober on a daemon thread until stopped, then once more.

    A sample that raises (a program that patched ``time``) is dropped: the
    program's run matters more than one sample.

    With a ``budget`` (a fraction of wall time), after the first
    :data:`UNBUDGETED_SAMPLES` (or :data:`UNBUDGETED_SECONDS` of CPU time spent in
    samples, if that comes first), a sample that took ``d`` seconds of the
    sampler thread's CPU time is followed by a wait of at least ``d / budget - d``
    (:meth:`pause_after`): the sampler thread, which holds the GIL while it works,
    takes at most ``budget`` of the program's wall time whatever a sample costs (a
    tenth of a second for the tracemalloc probe once numpy is imported:
    docs/performance.md). CPU time, not wall time: the time a sample waits for the GIL
    or for a core that other processes hold costs the program nothing, and counting it
    would leave a loaded machine too few samples. Every probe runs in every sample, so
    that their series stay comparable point by point.
    """

    def __init__(self, prober: Any, interval: float, budget: float | None = None) -> None:
        self.prober = prober
        self.interval = interval
        self.budget = budget
        self.step = 0
        #: CPU seconds spent in samples, and the waits the budget made longer than
        #: the interval.
        self.busy_seconds = 0.0
        self.stretched = 0
        self.tried = 0
        self.pid = os.getpid()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def pause_after(self, seconds: float) -> float:
        """The wait after a sample that took ``seconds``: the interval, or longer, so that
        sampling's share ``seconds / (seconds + wait)`` stays within the budget once
        :data:`UNBUDGETED_SAMPLES` samples were taken, or :data:`UNBUDGETED_SECONDS` spent
        in them."""
        if self.budget is None or seconds <= 0.0:
            return self.interval
        if self.tried < UNBUDGETED_SAMPLES and self.busy_seconds < UNBUDGETED_SECONDS:
            return self.interval
        return max(self.interval, seconds / self.budget - seconds)

    @property
    def mean_seconds(self) -> float:
        """The mean CPU time of a sample so far."""
        return self.busy_seconds / self.tried if self.tried else 0.0

    def _sample(self, force: bool = False) -> float:
        """One sample; returns the CPU seconds it took."""
        t0 = _thread_time()
        try:
            self.prober.sample(step=self.step, force=force)
            self.step += 1
        except Exception:
            pass
        took = _thread_time() - t0
        self.tried += 1
        self.busy_seconds += took
        return took

    def _wait_after(self, took: float) -> float:
        wait = self.pause_after(took)
        if wait > self.interval:
            self.stretched += 1
        return wait

    def _loop(self, wait: float) -> None:
        while not self._stop.wait(wait):
            wait = self._wait_after(self._sample())

    def start(self) -> None:
        self.prober.start()
        wait = self._wait_after(self._sample(force=True))
        self._thread = threading.Thread(target=self._loop, args=(wait,),
                                        name="memprobe-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample(force=True)
        try:
            self.prober.stop()
        except Exception:
            pass


def split_argv(argv: Sequence[str]) -> tuple[list[str], str | None, list[str]]:
    """``run``'s own options, the module (``-m``) or None, and the program's argv.

    Everything after the script or ``-m module`` belongs to the program, as
    with ``python``: ``memprobe run -m json.tool --sort-keys in.json``.
    """
    with_value = {"--probes", FLAG, "--interval", "--budget", "-o", "--output"}
    own: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return own, None, list(argv[i + 1:])
        if a == "-m":
            if i + 1 >= len(argv):
                raise CliError("-m needs a module name")
            return own, argv[i + 1], list(argv[i + 2:])
        if a.startswith("-m") and not a.startswith("--"):
            return own, a[2:], list(argv[i + 1:])
        if a in with_value:
            own += argv[i:i + 2]
            i += 2
            continue
        if a.startswith("-") and a != "-":
            own.append(a)
            i += 1
            continue
        return own, None, list(argv[i:])
    return own, None, []


def _exit_code(exc: SystemExit, err: TextIO | None) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    say(sys.stderr if sys.stderr is not None else err, str(code))
    return 1


def _program_traceback(exc: BaseException) -> None:
    """The traceback without memprobe's and runpy's own frames."""
    tb = exc.__traceback__
    while tb is not None and (
        tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>")
    ):
        tb = tb.tb_next
    try:
        traceback.print_exception(type(exc), exc, tb)
    except (OSError, ValueError, AttributeError):
        pass


def _target_path(script: str | None, module: str | None) -> str | None:
    """The file that will run: the script (a directory's ``__main__.py``), or the
    module's source when it can be found from the current directory, as ``-m`` runs it."""
    if script is not None:
        return os.path.join(script, "__main__.py") if os.path.isdir(script) else script
    assert module is not None
    import importlib.util

    saved = sys.path[:]
    sys.path[:1] = [os.getcwd()]  # as runpy will see it: the console script's dir is not it
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations:  # a package: its __main__
            spec = importlib.util.find_spec(module + ".__main__")
    except Exception:
        return None
    finally:
        sys.path[:] = saved
    return spec.origin if spec is not None and spec.origin else None


def _interval(value: float) -> float:
    if not MIN_INTERVAL_SECONDS <= value <= MAX_INTERVAL_SECONDS:
        raise ConfigError("--interval", f"must be a number of seconds from "
                          f"{MIN_INTERVAL_SECONDS} to {MAX_INTERVAL_SECONDS:g}, got {value!r}")
    return value


def _budget(value: float | None) -> float | None:
    if value is None:
        return None
    if not 0.0 < value <= 1.0:
        raise ConfigError("--budget", f"must be a fraction of wall time in (0, 1] "
                          f"(0.1: sampling takes at most 10%), got {value!r}")
    return value


def _save_samples(tmp: str, held: int, ident: tuple[int, int], out: str) -> tuple[str, str]:
    """After the rename of ``tmp`` onto ``out`` failed: where the samples are now, and why.

    ``tmp`` may have been deleted by the program (its bytes are copied from ``held``,
    memprobe's own fd on it), or ``out`` made a directory: the samples stay in a
    temporary file beside ``out``.
    """
    try:
        if path_identity(tmp) == ident:
            return tmp, ""
        if not same_file(held, ident):
            return "", "the program deleted memprobe's temporary file and closed its fd"
        new = temp_beside(out)
        with open(new, "wb") as f:
            offset = 0
            while chunk := os.pread(held, 2**20, offset):
                f.write(chunk)
                offset += len(chunk)
        try:
            commit(new, out)
            return out, ""
        except OSError:
            return new, ""
    except (OSError, MemprobeError) as exc:
        return "", str(exc)


def cmd_run(opts: Any, module: str | None, prog_args: list[str]) -> int:
    """Run the program; returns its exit status (memprobe's own errors raise)."""
    from .._plugins import collect_probes, get_plugin_manager
    from ..engine._prober import Prober

    _interval(opts.interval)
    budget = _budget(opts.budget)
    names = [n.strip() for n in opts.probes.split(",") if n.strip()]
    if not names:
        raise ConfigError("--probes", "names no probe")
    script = None
    if module is None:
        if not prog_args:
            raise CliError("run needs a script (memprobe run script.py) or -m module")
        script = prog_args[0]
        if not os.path.exists(script):
            raise CliError(f"{safe(script)}: no such file")
    shown = opts.output  # as the user gave it, for the messages
    out = os.path.abspath(shown)  # where it goes, whatever directory the program moves to
    # Every argument is checked before any file is opened: the probes (by
    # building the Prober, whose sink opens at the first sample), then the output.
    own = OwnSink()
    try:
        with warnings.catch_warnings(record=True) as caught:  # plugin faults, as our lines
            warnings.simplefilter("always")
            pm = get_plugin_manager()
            factories = {n: info.factory for n, info in collect_probes(pm).items()}
            options = parse_probe_options(opts.probe_option or (), names, factories)
            try:
                prober = Prober(probes={n: options.get(n, {}) for n in names}, sink=own,
                                history=16, plugin_manager=pm)
            except ConfigError as exc:
                raise refused_by_probe(exc, options) from None
    finally:  # printed also when --probes is refused
        for w in caught:
            say(sys.stderr, f"{PROG}: warning: {safe(w.message, 1000)}")
    if os.path.exists(out):
        target = _target_path(script, module)
        check_outputs([("-o", shown)], [("program being run", target)] if target else [])
    else:
        check_outputs([("-o", shown)], [])
    tmp = temp_beside(out)
    try:
        held = claim(tmp, shown)
    except BaseException:
        discard(tmp)
        raise
    held_ident = identity(held)
    own.open(tmp, {"role": "main", "command": module or script})
    sampler = Sampler(prober, opts.interval, budget)
    err = sys.stderr  # memprobe's own lines go here, whatever the program does to sys.stderr
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    code = 0
    where = ""  # where the samples went
    interrupted = False
    # The program's globals (or the exception holding its frames) stay alive until the
    # exit sample: what the program holds at its end is what the "end" column shows.
    keep: Any = None
    sampler.start()
    try:
        if module is None:
            assert script is not None
            sys.argv = prog_args
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            keep = runpy.run_path(script, run_name="__main__")
        else:
            sys.argv = [module, *prog_args]
            sys.path[0] = os.getcwd()
            keep = runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        keep = exc
        code = _exit_code(exc, err)
    except KeyboardInterrupt as exc:
        keep = exc
        _program_traceback(exc)
        interrupted = True
    except BaseException as exc:
        keep = exc
        _program_traceback(exc)
        code = 1
    finally:
        if os.getpid() == sampler.pid:
            try:
                if sys.stdout is not None:
                    sys.stdout.flush()
            except (OSError, ValueError, AttributeError):
                pass
            sampler.stop()
            del keep  # the program's globals go now, not at memprobe's exit
            for fault in own.faults:
                say(err, f"{PROG}: warning: {safe(fault, 1000)}")
            # The program's exit status is its own, whatever happens to the output.
            try:
                commit(tmp, out)
                where = out
            except OSError as exc:
                where, why = _save_samples(tmp, held, held_ident, out)
                if where != out:
                    say(err, f"{PROG}: warning: {safe(shown)} could not be written "
                        f"({exc.strerror}); " + (
                            f"the samples are kept in {safe(where)}" if where else
                            f"the samples are lost ({safe(why)})"))
            if same_file(held, held_ident):
                os.close(held)
            sys.argv = saved_argv
            if saved_path0 is not None:
                sys.path[0] = saved_path0
    if os.getpid() != sampler.pid:  # a child the program forked: its exit, not ours
        if interrupted:
            return 130
        return code
    if not opts.quiet and where:
        if sampler.stretched:
            say(err, f"{PROG}: {sampler.stretched} of {sampler.tried - 1} waits between "
                f"samples were longer than --interval {opts.interval:g}, to keep sampling "
                f"within --budget {budget:g} of the run (a sample took "
                f"{sampler.mean_seconds:.2g} s of CPU on average); --budget 1 samples every "
                "--interval")
        shown_where = shown if where == out else where
        hint = shlex.quote(shown_where)  # pasted into a shell as it is
        say(err, f"{PROG}: {sampler.step} samples of {','.join(names)} written to "
            f"{safe(shown_where, 1000)}; see `memprobe report {safe(hint, 1000)}`")
    if interrupted:
        # As python does on an uncaught KeyboardInterrupt: die of SIGINT.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    return code
