"""nmse against the number of in-context examples, one curve per procedure (the paper's Figure 2 style)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

STYLE = {"transformer": ("black", "-"), "posterior_mean": ("tab:blue", "--"), "em": ("tab:green", ":"),
         "argmin": ("tab:orange", "-."), "ols": ("tab:red", "-")}


def nmse_vs_position(curves: dict[str, np.ndarray], path: str | Path, title: str, noise_floor: float | None = None) -> Path:
    """Log-scale nmse at every position (OLS peaks near i = d, the others sit far below);
    `noise_floor` draws σ²/d, the error of predicting with the true component."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name, curve in curves.items():
        color, line = STYLE.get(name, (None, "-"))
        ax.plot(np.arange(len(curve)), curve, line, color=color, label=name)
    if noise_floor is not None:
        ax.axhline(noise_floor, color="grey", lw=0.8, label="σ²/d")
    ax.set_yscale("log")
    ax.set_xlabel("in-context examples i")
    ax.set_ylabel("nmse  E(ŷ_i − y_i)² / d")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
