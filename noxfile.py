"""Developer and CI sessions. ``nox -s tests`` is what CI runs."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

CONSTRAINTS = ("-c", "constraints.txt")
EXAMPLE_PLUGIN = "tests/plugins/memprobe_example"


def _install(session: nox.Session, extras: str, *, torch: bool = True) -> None:
    # torch first and pinned: a looser torch lets pip pick a multi-GB CUDA build. The
    # sessions that need no torch (docs) skip it.
    if torch:
        session.install(*CONSTRAINTS, "torch==2.13.0")
    session.install(*CONSTRAINTS, "-e", f".[{extras}]")


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """The test suite, with real Ray/RLlib, Ray's metrics agent, memray and the example
    plugin installed.

    Three pytest invocations, each a process of its own: the core, on both cores with
    pytest-xdist (its leak tests judge the memory of their own worker process; some
    build RLlib pieces, but no Ray instance is started there), tests/rllib (one local
    Ray for all), and tests/ray (its own multi-node Ray cluster and a real
    Prometheus). ``--durations=15`` shows where each run's time goes.
    """
    _install(session, "test,rllib,plot,native,ray,top")
    session.install(*CONSTRAINTS, EXAMPLE_PLUGIN)
    if session.posargs:
        session.run("pytest", *session.posargs)
        return
    session.run("pytest", "-q", "-n", "2", "--durations=15",
                "--ignore=tests/rllib", "--ignore=tests/ray")
    session.run("pytest", "-q", "--durations=15", "tests/rllib")
    session.run("pytest", "-q", "--durations=15", "tests/ray")


@nox.session(python="3.11")
def demo(session: nox.Session) -> None:
    """The main job: PPO on CartPole-v1 with MemoryProbeCallback; ends with a per-process
    verdict, a PNG of memory (the plot extra) and the command that opens the report."""
    _install(session, "rllib,plot")
    session.run("python", "-m", "memprobe_rllib.demo", *session.posargs)


@nox.session(python="3.11", default=False)
def lint(session: nox.Session) -> None:
    """ruff."""
    session.install("ruff")
    session.run("ruff", "check", "src", "tests", "benchmarks", "noxfile.py")


@nox.session(python="3.11", default=False)
def typecheck(session: nox.Session) -> None:
    """mypy on the core package."""
    _install(session, "test")
    session.install("mypy")
    session.run("mypy")


@nox.session(python="3.11", default=False)
def docs(session: nox.Session) -> None:
    """Build the documentation site with mkdocs --strict (the toolchain pinned in
    constraints.txt); a broken cross-reference fails it. CI (.ci/run) runs it."""
    _install(session, "docs,plot", torch=False)
    session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session(python="3.11", default=False)
def benchmarks(session: nox.Session) -> None:
    """Run the benchmarks (not part of the test run); pass a script name to run one."""
    _install(session, "test,rllib")
    scripts = session.posargs or ["benchmarks/run_all.py"]
    for script in scripts:
        session.run("python", script)
