"""Least Volume's figure: the paper's trade-off between reconstruction and latent set dimension
over the λ grid, one line per penalty (official notebook/plot_results.ipynb: x = L2 reconstruction
with every dimension kept, log scale; y = latent set dimension at δ; one point per λ)."""
from __future__ import annotations

from pathlib import Path

COLOURS = {"vol": "tab:green", "l1": "tab:orange", "lasso": "tab:blue", "st": "tab:red"}


def trade_off_plot(points: dict[str, list[tuple[float, float, float]]], path: Path, rel_tol: float,
                   title: str = "") -> Path:
    """points: penalty -> [(λ, rec, latent_dim)]; a line per penalty through its λ values (in λ
    order), each point labelled with its λ. Lower-left is better: fewer dimensions at the same
    reconstruction."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not points:
        raise ValueError("trade_off_plot needs at least one penalty's points")
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, pts in points.items():
        pts = sorted(pts)
        ax.plot([p[1] for p in pts], [p[2] for p in pts], "o-", label=name, color=COLOURS.get(name), alpha=0.9)
        for lam, rec, dim in pts:
            ax.annotate(f"{lam:g}", (rec, dim), textcoords="offset points", xytext=(4, 3), fontsize=6)
    ax.set_xscale("log")
    ax.set_xlabel("$L_2$ reconstruction (all dimensions kept)")
    ax.set_ylabel(f"latent set dimension (δ = {rel_tol:g})")
    ax.set_title(title or "Least Volume vs L1 / Lasso / Student-t over λ")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
