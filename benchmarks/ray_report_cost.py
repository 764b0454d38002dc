"""The cost of ``memprobe report --ray``: N files of M MiB on a 2-node ``ray.cluster_utils.Cluster``.

Run (Ray serialized with the other users of this machine):
    PYTHONPATH=src flock /tmp/ray.lock python benchmarks/ray_report_cost.py [--grid 4x1,16x1,64x1,4x8,16x8] [--repeat 3]

Starts two Ray nodes with the dashboard (the state API), writes N JSONL files
of M MiB (process and gc keys, one process per file) under each node's
``<session logs>/memprobe/<node id>/`` (half per node), then measures, each in
a fresh interpreter, interleaved and ``--repeat`` times (medians printed):

- ``fetch``: :func:`memprobe_ray.fetch_jsonl` alone, the transfer;
- ``--ray``: ``memprobe report --ray ADDRESS``, the transfer and the report;
- ``local``: ``memprobe report FILES`` on the same files read from disk.

Seconds, and how much the peak rss (VmHWM) of the reading process grew over its
peak once its imports were done (``import ray`` alone is some 60 MiB). The transfer's peak
should not grow with N; the report's grows with the samples it holds, as the
local report's does, and ``--ray`` minus ``local`` is what the transfer adds.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import contextlib, io, sys, time
def hwm_mib():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
what, address, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
import memprobe.cli, memprobe_ray, ray.util.state  # each imports the same before the clock
base = hwm_mib()
t = time.perf_counter()
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    if what == "fetch":
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            got = memprobe_ray.fetch_jsonl(d, address)
            assert got.files, "nothing fetched"
    elif what == "ray":
        assert memprobe.cli.main(["report", "--ray", address]) == 0
    else:
        assert memprobe.cli.main(["report", *rest]) == 0
print(f"{time.perf_counter() - t:.3f} {hwm_mib() - base:.1f}")
"""


def _line(pid: int, i: int) -> str:
    values = {f"memprobe/process/{k}": 1e8 + i * 4096 for k in (
        "rss_bytes", "vms_bytes", "shared_bytes", "uss_bytes")}
    values.update({"memprobe/process/num_fds": 40, "memprobe/process/num_threads": 20})
    values.update({f"memprobe/gc/{k}": i for k in (
        "collections_0_count", "collections_1_count", "collections_2_count",
        "collected_count", "uncollectable_count", "garbage_count", "objects_count")})
    values.update({"memprobe/gc/pause_seconds": 1e-4, "memprobe/overhead/sample_seconds": 3e-5})
    return json.dumps({"time": 1.7e9 + i * 5.0, "step": None, "pid": pid, "role": "actor",
                       "name": "Bench", "index": str(pid), "node": "n", "values": values}) + "\n"


def write_files(roots: list[str], n: int, mib: float) -> list[str]:
    paths = []
    for f in range(n):
        root = roots[f % len(roots)]
        os.makedirs(root, exist_ok=True)
        path = os.path.join(root, f"memprobe-{10_000 + f}.jsonl")
        with open(path, "w") as out:
            size, i = 0, 0
            while size < mib * 2**20:
                line = _line(10_000 + f, i)
                out.write(line)
                size += len(line)
                i += 1
        paths.append(path)
    return paths


def measure(what: str, address: str, files: list[str]) -> tuple[float, float]:
    r = subprocess.run([sys.executable, "-c", CHILD, what, address, *files],
                       capture_output=True, text=True, timeout=1800, check=True)
    seconds, peak = r.stdout.split()
    return float(seconds), float(peak)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", default="4x1,16x1,64x1,4x8,16x8",
                    help="NxM: N files of M MiB, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    grid = [(int(a), float(b)) for a, b in (g.split("x") for g in args.grid.split(","))]

    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": True, "dashboard_port": free_port()})
    second = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    time.sleep(3)  # the dashboard agents register with the head
    folder = os.path.join(cluster.head_node.get_logs_dir_path(), "memprobe")
    roots = [os.path.join(folder, cluster.head_node.node_id),
             os.path.join(folder, second.node_id)]
    print(f"2-node Cluster, {args.repeat} interleaved runs each, medians; "
          "seconds / growth of the peak rss (MiB) of the reading process")
    print(f"{'N':>4} {'MiB':>5} {'total':>6}  {'fetch':>14}  {'report --ray':>14}  "
          f"{'report FILES':>14}  {'--ray - local':>13}")
    try:
        for n, mib in grid:
            shutil.rmtree(folder, ignore_errors=True)
            files = write_files(roots, n, mib)
            got: dict[str, list[tuple[float, float]]] = {"fetch": [], "ray": [], "local": []}
            for _ in range(args.repeat):
                for what in got:
                    got[what].append(measure(what, cluster.address, files))
            med = {w: (statistics.median(s for s, _ in v), statistics.median(p for _, p in v))
                   for w, v in got.items()}
            cells = "  ".join(f"{med[w][0]:6.2f} / {med[w][1]:5.0f}" for w in got)
            print(f"{n:>4} {mib:>5g} {n * mib:>6g}  {cells}  "
                  f"{med['ray'][1] - med['local'][1]:+9.0f} MiB", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        cluster.shutdown()
        for d in glob.glob(os.path.join(tempfile.gettempdir(), "memprobe-ray-*")):
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
