"""``memprobe_ray.report()``: ``memprobe report --ray`` called from Python.

It drives the command (:func:`memprobe.cli.main`), which reads the nodes' files with
:mod:`memprobe_ray.logs`: this module sits above both, so no import runs in a circle.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["report"]


def report(address: str | None = None, options: Sequence[str] = ()) -> int:
    """``memprobe report --ray``: the report of every node's files on stdout; the exit status.

    :param address: the cluster; default: the one this process is connected to.
    :param options: more options of ``memprobe report``, e.g. ``["--html", "out.html"]``.
    """
    from memprobe.cli import main

    if address is None:
        import ray

        if ray.is_initialized():
            address = ray.get_runtime_context().gcs_address
    return main(["report", "--ray", *([address] if address else []), *options])
