"""The verdicts ``memprobe report`` gives on many JSONL files, to compare two versions.

Run: ``PYTHONPATH=<src> python benchmarks/report_verdicts.py OUT.json 'GLOB' ...`` once
per version (e.g. a ``git archive`` of the older commit's ``src`` and this tree's), then
``python benchmarks/report_verdicts.py --compare BEFORE.json AFTER.json``: every verdict
whose status, kind or first culprit changed, and the count of each change. Each file is
read as the report reads it (:func:`memprobe.report._runs.load_runs`, ``summarize``); a
file that cannot be read is listed with its error.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import warnings


def verdicts(patterns: list[str]) -> dict[str, list[str | None]]:
    """``{"file|process|metric": [status, kind, first culprit]}``."""
    from memprobe.report._runs import load_runs, summarize

    out: dict[str, list[str | None]] = {}
    files = sorted({f for p in patterns for f in glob.glob(p, recursive=True)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f in files:
            try:
                for run in load_runs([f]):
                    for m in summarize(run).metrics:
                        v = m.verdict
                        if v is not None:
                            out[f"{f}|{run.label}|{m.short}"] = [
                                v.status, v.kind, (v.culprits or [None])[0]]
            except Exception as e:  # a file from elsewhere: say so, go on
                out[f] = ["error", type(e).__name__, str(e)[:80]]
    return out


def compare(before: dict[str, list], after: dict[str, list]) -> None:
    changes: collections.Counter[tuple[str, str]] = collections.Counter()
    common = [k for k in before if k in after]
    for k in common:
        if before[k] != after[k]:
            changes[(before[k][0], after[k][0])] += 1
            f, _, metric = k.split("|")
            print(f"| {f} | {metric} | {', '.join(map(str, before[k]))} | "
                  f"{', '.join(map(str, after[k]))} |")
    print(f"{len(common)} verdicts of {len({k.split('|')[0] for k in common})} files; "
          f"changed (before, after): {dict(changes)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("patterns", nargs="*")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args()
    if args.compare:
        with open(args.compare[0]) as b, open(args.compare[1]) as a:
            compare(json.load(b), json.load(a))
        return
    with open(args.out, "w") as fh:
        json.dump(verdicts(args.patterns), fh)


if __name__ == "__main__":
    main()
