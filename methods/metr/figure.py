"""Accuracy vs keep rate from a recorded mini table: the mean over seeds of each row at each rho,
as a markdown table and a plot (results/<stem>_acc_vs_rho.png).

    python -m methods.metr.figure [results/metr_mini.json]   # or results/metr_mini_heldout.json
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROWS = ("evit", "metr", "evit_random", "metr_random", "base")
RATES = (100, 70, 50, 30)


def means(path: Path, experiment: str = "metr_mini") -> dict[str, dict[int, float]]:
    """row -> {100 rho: mean accuracy over the table's seeds}."""
    table = next(t for t in json.loads(path.read_text())["tables"] if t["experiment"] == experiment)
    return {row: {k: statistics.fmean(s[f"acc_k{k}"] for s in table["runs"][row]) for k in RATES}
            for row in ROWS if row in table["runs"]}


def markdown(m: dict[str, dict[int, float]]) -> str:
    lines = ["| row | " + " | ".join(f"rho = {k / 100:g}" for k in RATES) + " |", "|---|" + "---|" * len(RATES)]
    lines += [f"| {row} | " + " | ".join(f"{v[k]:.1f}" for k in RATES) + " |" for row, v in m.items()]
    if "metr" in m and "evit" in m:
        lines.append("| metr - evit | " + " | ".join(f"{m['metr'][k] - m['evit'][k]:+.1f}" for k in RATES) + " |")
    if "metr_random" in m and "evit_random" in m:
        lines.append("| metr_random - evit_random | " + " | ".join(
            f"{m['metr_random'][k] - m['evit_random'][k]:+.1f}" for k in RATES) + " |")
    return "\n".join(lines)


def plot(m: dict[str, dict[int, float]], out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.5))
    style = {"evit": ("C0", "-"), "metr": ("C3", "-"), "evit_random": ("C0", "--"), "metr_random": ("C3", "--"),
             "base": ("grey", ":")}
    for row, v in m.items():
        ax.plot([k / 100 for k in RATES], [v[k] for k in RATES], marker="o", color=style[row][0],
                linestyle=style[row][1], label=row)
    ax.set_xlabel("keep rate rho at the reducing blocks"), ax.set_ylabel("test accuracy (%)")
    ax.invert_xaxis(), ax.legend(fontsize=8), ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str]) -> None:
    path = Path(argv[0] if argv else "results/metr_mini.json")
    m = means(path)
    print(markdown(m))
    print(plot(m, path.with_name(path.stem + "_acc_vs_rho.png")))


if __name__ == "__main__":
    main(sys.argv[1:])
