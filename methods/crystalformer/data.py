"""Which crystal set a run uses (`cfg.dataset`), its fixed split, and pymatgen conversion."""
from __future__ import annotations

import numpy as np
import torch

from common.config import UserError
from common.data import crystals as cdata


def from_structure(structure) -> dict:
    """A pymatgen Structure as the crystal dict the model reads (no target)."""
    return {"z": np.array([site.specie.Z for site in structure], dtype=np.int64),
            "pos": structure.cart_coords.astype(np.float64), "lattice": structure.lattice.matrix.astype(np.float64),
            "target": float("nan"), "formula": structure.composition.reduced_formula}


def load_crystals(ds) -> list[dict]:
    if ds.name == "ewald_crystals":
        return cdata.load_ewald(ds.size, ds.generation_seed, ds.root, ds.max_atoms)
    if ds.name == "dcdft":
        return cdata.load_dcdft(ds.target)
    if ds.name in ("jarvis_dft_3d", "mp_megnet"):
        return cdata.load_jarvis({"jarvis_dft_3d": "dft_3d", "mp_megnet": "megnet"}[ds.name], ds.target,
                                 ds.root, ds.download)
    raise UserError(f"'{ds.name}' is not a crystal dataset; use ewald_crystals, dcdft, jarvis_dft_3d or mp_megnet",
                    exit_code=2)


def split(crystals: list[dict], ds) -> dict[str, list[dict]]:
    """Train/val/test by a fixed permutation (seed `split_seed`), sizes as fractions or counts."""
    n = len(crystals)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(ds.split_seed))).tolist()
    sizes = [int(round(f * n)) if f < 1 else int(f) for f in (ds.val, ds.test)]
    if sum(sizes) >= n:
        raise UserError(f"val + test ({sum(sizes)}) leave no training crystals out of {n}")
    val, test = perm[:sizes[0]], perm[sizes[0]:sum(sizes)]
    train = perm[sum(sizes):]
    return {"train": [crystals[i] for i in train], "val": [crystals[i] for i in val],
            "test": [crystals[i] for i in test]}
