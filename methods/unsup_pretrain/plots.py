"""Figures of the rates sweep: excess risk against m per n with bootstrap bands, and m*(n)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from common.eval.scaling import fit_power_law


def mean_band(values: np.ndarray, level: float = 0.95, n_boot: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap band of the mean over replicates: values (k, R) -> (low (k,), high (k,))."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, values.shape[1], size=(n_boot, values.shape[1]))
    means = values[:, picks].mean(axis=2)                     # (k, n_boot)
    return np.quantile(means, (1 - level) / 2, axis=1), np.quantile(means, (1 + level) / 2, axis=1)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def excess_vs_unlabeled(curves: dict[str, np.ndarray], labeled: list[int], unlabeled: list[int], path: str | Path,
                        title: str, level: float = 0.95, seed: int = 0) -> Path:
    """Per n: MLE + ERM's excess risk against m (mean over replicates, bootstrap band), OLS on x
    (dashed, flat in m), the oracle (dotted), and the shuffled control at the largest n (grey)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    colors = plt.cm.viridis(np.linspace(0.1, 0.85, len(labeled)))
    m = np.asarray(unlabeled, dtype=float)
    for i, (n, color) in enumerate(zip(labeled, colors)):
        curve = curves["pretrain"][i]
        low, high = mean_band(curve, level, seed=seed)
        ax.plot(m, curve.mean(axis=1), "o-", ms=3, color=color, label=f"MLE + ERM, n = {n}")
        ax.fill_between(m, low, high, color=color, alpha=0.25, lw=0)
        ax.axhline(curves["ols"][i].mean(), color=color, ls="--", lw=1)
        ax.axhline(curves["oracle"][i].mean(), color=color, ls=":", lw=1)
    ax.plot(m, curves["pretrain_shuffled"][-1].mean(axis=1), "-", color="grey", lw=1,
            label=f"shuffled unlabeled x, n = {labeled[-1]}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("unlabeled points m")
    ax.set_ylabel("excess risk")
    ax.set_title(title + "\n(dashed: OLS on x; dotted: ERM on the true posterior)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def crossover_vs_labeled(labeled: list[int], m_star: np.ndarray, path: str | Path, title: str) -> Path:
    """m*(n), the unlabeled size at which MLE + ERM reaches OLS on x, with its power-law fit."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.6))
    n = np.asarray(labeled, dtype=float)
    found = np.isfinite(m_star)
    ax.plot(n[found], m_star[found], "o", color="black", label="m*(n)")
    if found.sum() >= 2:
        exponent, prefactor = fit_power_law(n[found], m_star[found])
        ax.plot(n, prefactor * n ** exponent, "-", color="tab:red", label=f"fit: m* ∝ n^{exponent:.2f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("labeled points n")
    ax.set_ylabel("crossover m*")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
