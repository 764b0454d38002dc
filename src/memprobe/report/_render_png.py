"""Run summaries as a PNG: memory over time, one panel per metric, leaks marked in red
where their growth began.

A count panel (``process/num_fds``) is drawn only when a process's count leaks:
otherwise its steps are memprobe's own file and sampler thread (9 to 10 fds), which
would take a third of the figure to say nothing.

Needs matplotlib (the ``plot`` extra); :func:`pyplot` is ``None`` without it.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from .. import keys
from .._format import safe
from ._runs import RunSummary, fmt

#: Metrics drawn, one panel each, when present (after the run's prefix).
#: traced_bytes only where filtered_bytes (the one judged) is absent.
PLOT_METRICS = ("process/rss_bytes", "tracemalloc/filtered_bytes", "tracemalloc/traced_bytes",
                "process/num_fds", "objects/total_count")
#: Drawn only when the metric leaks in some process.
ONLY_WHEN_LEAKING = frozenset({"process/num_fds"})


def growth_onset(ys: Sequence[float]) -> int:
    """Index of the sample where a rising series began to rise: the last point still at
    its starting level (within 2% of the whole rise) before it first passes 5% of it.

    The starting level is the median of the first 5% of the points, so one early
    spike does not move it.
    """
    n = len(ys)
    if n < 2:
        return 0
    head = sorted(ys[:max(1, n // 20)])
    base = head[(len(head) - 1) // 2]
    rise = max(ys) - base
    if not rise > 0:
        return 0
    first = next((i for i, y in enumerate(ys) if y - base > 0.05 * rise), 0)
    still = [j for j in range(first) if ys[j] - base <= 0.02 * rise]
    return still[-1] if still else 0


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or ``None`` when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def render(plt: Any, summaries: Sequence[RunSummary]) -> bytes:
    """The PNG's bytes."""
    fig = figure(plt, summaries)
    buf = io.BytesIO()
    with plt.rc_context(_PLAIN_TEXT):
        fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


#: Text drawn as written: a ``$`` in a tag, a command or a phase's name is not
#: matplotlib's mathtext (``$\foo{$`` would stop the plot with a parse error).
_PLAIN_TEXT = {"text.parse_math": False, "text.usetex": False}


def figure(plt: Any, summaries: Sequence[RunSummary]) -> Any:
    """The matplotlib figure: one panel per metric, leaks marked and labelled inside it."""
    with plt.rc_context(_PLAIN_TEXT):
        return _figure(plt, summaries)


def _figure(plt: Any, summaries: Sequence[RunSummary]) -> Any:
    from matplotlib.ticker import MaxNLocator

    t0 = min(s.run.start_seconds for s in summaries)
    shown = {m.short for s in summaries for m in s.metrics
             if m.short not in ONLY_WHEN_LEAKING or m.leak}
    panels = [m for m in PLOT_METRICS if m in shown] or ["process/rss_bytes"]
    if "tracemalloc/filtered_bytes" in panels and "tracemalloc/traced_bytes" in panels:
        panels.remove("tracemalloc/traced_bytes")
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.6 * len(panels) + 0.6),
                             sharex=True, squeeze=False)
    for ax, metric in zip(axes[:, 0], panels):
        units = {m.unit for s in summaries for m in s.metrics if m.short == metric}
        mib = "bytes" in units
        integer = True
        labels = []
        for s in summaries:
            key = keys.prefix_path(s.run.prefix) + metric
            # Every point up to the digest's PLOT_POINTS, else evenly thinned.
            _, ts, ys_all = s.run.digest.series(key)
            pts = [(t - t0, y) for t, y in zip(ts, ys_all)]
            if not pts:
                continue
            integer = integer and all(float(y).is_integer() for _, y in pts)
            ys = [y / 2**20 if mib else y for _, y in pts]
            ax.plot([t for t, _ in pts], ys, label=safe(s.run.label, 60), linewidth=1.4)
            for m in s.metrics:
                if m.short == metric and m.leak:
                    t, y = pts[growth_onset([y for _, y in pts])]
                    ax.plot([t], [y / 2**20 if mib else y], marker="v", markersize=11,
                            color="red", linestyle="none", zorder=5)
                    rate = m.verdict.rate_per_hour
                    labels.append(f"growing from {t:.1f} s" + (
                        f": {fmt(rate, m.unit, True)}/h" if rate is not None else ""))
        _draw_phases(ax, summaries, t0, first=ax is axes[0, 0])
        if labels:
            # Inside the frame, top left, on a white box: never over the frame or the title.
            ax.text(0.01, 0.95, "; ".join(labels[:2]), transform=ax.transAxes, color="red",
                    fontsize=9, va="top", ha="left",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
        if integer and not mib:
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(metric.replace("_bytes", " (MiB)") if mib else metric, fontsize=8)
        ax.margins(y=0.2)
        ax.grid(True, alpha=0.3)
        if len(summaries) <= 8:
            ax.legend(loc="lower right", fontsize=8)
    axes[-1, 0].set_xlabel("seconds since the first sample")
    fig.suptitle("memprobe: memory over time (red: where a leak began)"
                 + ("; shaded: phases, dashed: marks" if any(s.spans or s.marks
                                                            for s in summaries) else ""))
    fig.tight_layout()
    return fig


#: Colours of the phases' bands, by label in order of first appearance.
PHASE_COLORS = ("tab:blue", "tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:olive")


def _draw_phases(ax: Any, summaries: Sequence[RunSummary], t0: float, first: bool) -> None:
    """Spans as shaded bands, marks as dashed vertical lines; in the top panel, each
    label once, at its first occurrence, along the bottom of the frame."""
    colors: dict[str, str] = {}
    named: set[str] = set()

    def name(x: float, label: str, color: str) -> None:
        if first and label not in named:
            named.add(label)
            ax.text(x, 0.02, safe(label, 20), transform=ax.get_xaxis_transform(),
                    fontsize=7, color=color, va="bottom", ha="left", clip_on=True)

    for s in summaries:
        for start, end, label in s.spans:
            color = colors.setdefault(label, PHASE_COLORS[len(colors) % len(PHASE_COLORS)])
            ax.axvspan(start - t0, end - t0, color=color, alpha=0.12, linewidth=0, zorder=0)
            name(start - t0, label, color)
        for t, label in s.marks:
            ax.axvline(t - t0, color="0.35", linestyle="--", linewidth=0.8, zorder=1)
            name(t - t0, label, "0.25")
