"""Risk against the number of in-context examples, one curve per procedure."""
from __future__ import annotations

from pathlib import Path

import numpy as np

STYLE = {"transformer": ("black", "-"), "bayes": ("tab:blue", "--"), "ridge_affine": ("tab:orange", "-."),
         "ridge_x": ("tab:red", ":"), "prefix_mean": ("tab:green", "-"), "untrained": ("grey", ":")}


def risk_vs_position(curves: dict[str, list[float]], path: str | Path, title: str, noise_floor: float | None = None) -> Path:
    """Log-scale E(ŷ_i − y_i)² at every position i; `noise_floor` draws σ², the error of the true w."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name, curve in curves.items():
        color, line = STYLE.get(name, (None, "-"))
        ax.plot(np.arange(len(curve)), curve, line, color=color, label=name)
    if noise_floor:
        ax.axhline(noise_floor, color="grey", lw=0.8, label="σ²")
    ax.set_yscale("log")
    ax.set_xlabel("in-context examples i")
    ax.set_ylabel("risk  E(ŷ_i − y_i)²")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
