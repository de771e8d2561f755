"""Δ-SGD's figures, written into the run dir (reproduce copies the first seed's next to the table):
the accuracy of every row after each evaluated round, one panel per task, and the local step
sizes of the step-size rows per round (median over clients and steps, band min to max)."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def _panels(n: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(3.6 * n, 3.4), squeeze=False)
    return plt, fig, axes[0]


def curves_plot(curves: dict[str, dict[str, list]], path: Path, title: str = "") -> Path:
    """`curves[task][row]` = [(round, acc), ...]: accuracy against rounds, one panel per task."""
    plt, fig, axes = _panels(len(curves))
    for ax, (task, rows) in zip(axes, curves.items()):
        for row, pts in rows.items():
            if pts:
                style = "-" if row in ("dsgd", "growth") else "--"
                ax.plot([p[0] + 1 for p in pts], [p[1] for p in pts], style, marker=".", lw=1.2, label=row)
        ax.set_title(task), ax.set_xlabel("round"), ax.set_ylabel("accuracy (%)")
    axes[0].legend(fontsize=6)
    fig.suptitle(f"Δ-SGD mini: accuracy per round ({title})" if title else "Δ-SGD mini: accuracy per round")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def steps_plot(traces: dict[str, dict[str, list]], rows: dict, path: Path, title: str = "") -> Path:
    """`traces[task][row]` = [(round, [step sizes of one client's pass]), ...]: per round, the
    median step over clients and steps with the min-max band, for the dsgd and growth rows."""
    plt, fig, axes = _panels(len(traces))
    for ax, (task, per_row) in zip(axes, traces.items()):
        for row, trace in per_row.items():
            if rows[row]["kind"] not in ("dsgd", "growth") or not trace:
                continue
            by_round: dict[int, list[float]] = {}
            for r, steps in trace:
                by_round.setdefault(int(r), []).extend(steps)
            rs = sorted(by_round)
            med = [float(np.median(by_round[r])) for r in rs]
            lo, hi = [min(by_round[r]) for r in rs], [max(by_round[r]) for r in rs]
            line, = ax.plot([r + 1 for r in rs], med, marker=".", lw=1.2, label=row)
            ax.fill_between([r + 1 for r in rs], lo, hi, color=line.get_color(), alpha=0.15)
        ax.set_yscale("log"), ax.set_title(task), ax.set_xlabel("round"), ax.set_ylabel("local step size")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"local step sizes ({title})" if title else "local step sizes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["curves_plot", "steps_plot"]
