"""The figure of NCL's claim: images that activate a feature dimension most."""
from __future__ import annotations

from pathlib import Path

import torch


def top_activation_grid(z: torch.Tensor, images: torch.Tensor, labels: torch.Tensor, path: Path,
                        dims: torch.Tensor, per_dim: int = 8, title: str = "") -> Path:
    """One row per dimension in `dims`: the `per_dim` images with the largest z[:, dim],
    titled with their true class (a consistent row = an interpretable dimension)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(dims), per_dim, figsize=(per_dim * 0.9, len(dims) * 1.0), squeeze=False)
    for r, d in enumerate(dims.tolist()):
        top = z[:, d].topk(per_dim).indices
        for c, i in enumerate(top.tolist()):
            ax = axes[r][c]
            ax.imshow(images[i].permute(1, 2, 0).squeeze(-1).numpy(), cmap="gray")
            ax.set_xticks([]), ax.set_yticks([])
            ax.set_title(str(int(labels[i])), fontsize=7, pad=1)
            if c == 0:
                ax.set_ylabel(f"dim {d}", fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
