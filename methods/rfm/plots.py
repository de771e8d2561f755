"""The learned density on a world map (equirectangular) beside the data."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from common.data.manifold_data import latlon_to_xyz, xyz_to_latlon


def density_map(log_prob_fn, data_xyz: torch.Tensor, path: Path, title: str, resolution: int = 3) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lat = np.arange(-90 + resolution / 2, 90, resolution)
    lon = np.arange(-180 + resolution / 2, 180, resolution)
    grid_lon, grid_lat = np.meshgrid(lon, lat)
    xyz = torch.from_numpy(latlon_to_xyz(grid_lat.ravel(), grid_lon.ravel()))
    # log density, clipped 10 nats below the peak: a linear scale shows only the sharpest mode
    log_density = log_prob_fn(xyz).reshape(grid_lat.shape).numpy()
    top = float(np.nanmax(log_density))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.2), sharey=True)
    dlat, dlon = xyz_to_latlon(data_xyz.numpy())
    axes[0].scatter(dlon, dlat, s=2, c="crimson", alpha=0.5)
    axes[0].set_title("data (test + train)")
    image = axes[1].imshow(log_density, origin="lower", extent=(-180, 180, -90, 90), cmap="magma",
                           aspect="auto", vmin=top - 10.0, vmax=top)
    axes[1].set_title(title)
    fig.colorbar(image, ax=axes[1], label="log density (nats)")
    for ax in axes:
        ax.set_xlim(-180, 180), ax.set_ylim(-90, 90), ax.set_xlabel("longitude")
    axes[0].set_ylabel("latitude")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
