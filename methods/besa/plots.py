"""BESA's figure: the sparsity it learned for every linear layer of every block."""
from __future__ import annotations

from pathlib import Path


def layer_sparsity_plot(sparsities: dict[str, float], path: Path, target: float, title: str = "") -> Path:
    """One line per linear type (q/k/v/o/gate/up/down) across blocks; the target dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[int, float]]] = {}
    for key, value in sparsities.items():
        block, _, name = key.partition(".")
        if block.isdigit():
            series.setdefault(name.rsplit(".", 1)[-1], []).append((int(block), 100 * value))
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=name)
    ax.axhline(100 * target, color="k", ls="--", lw=1, label="target")
    ax.set_xlabel("block"), ax.set_ylabel("sparsity (%)"), ax.set_title(title or "BESA: learned sparsity per layer")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
