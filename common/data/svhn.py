"""SVHN, cropped digits (Netzer et al., 2011): 32x32 RGB house-number digits, 73,257 training and
26,032 test images in the official MATLAB files `train_32x32.mat` / `test_32x32.mat`
(`X`: (32, 32, 3, N) uint8, `y`: (N, 1) with label 10 for the digit 0, which we map to 0, as
torchvision and the Twin-sight official loader do).

Search order (DESIGN.md section 5): <data root>/svhn, the shared offline copy
(../shared/data/svhn beside the project), then a download of both files when allowed, each
checked by sha256 before it is used. The `extra` split (1.3 GB) is not used.

Registered in `common.data.REGISTRY` on import (as `common.data.tinyimagenet`): a line in
common/data/__init__.py would stale every recorded table.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from common.data import REGISTRY
from common.data.download import DatasetNotFound, find_or_fetch

URL = "http://ufldl.stanford.edu/housenumbers/"
# sha256 (and sizes in bytes) as TensorFlow Datasets pins them for these URLs
# (tensorflow_datasets/url_checksums/svhn_cropped.txt): train 182,040,794 B, test 64,275,384 B.
# Not checked against the files from here (no internet); a different file is refused.
FILES = {
    "train": ("train_32x32.mat", "435e94d69a87fde4fd4d7f3dd208dfc32cb6ae8af2240d066de1df7508d083b8"),
    "test": ("test_32x32.mat", "cdce80dfb2a2c4c6160906d0bd7c68ec5a99d7ca4831afa54f09182025b6a75b"),
}
FOLDER = "svhn"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / FOLDER
HOW = (f"python scripts/train.py ... dataset.download=true on a machine with internet (fetches "
       f"{URL}train_32x32.mat and test_32x32.mat, 235 MiB, into <data root>/{FOLDER}), or put those "
       f"two files there")


def read_mat(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(images uint8 (N, 3, 32, 32), labels int64 (N,) in 0..9) from one official .mat file."""
    from scipy.io import loadmat

    try:
        mat = loadmat(str(path))
    except (ValueError, OSError) as err:
        raise DatasetNotFound(f"{path} is not a readable MATLAB file ({err}); delete it and download again.")
    if "X" not in mat or "y" not in mat:
        raise DatasetNotFound(f"{path} holds no X / y arrays: not an SVHN cropped-digits file.")
    x, y = np.asarray(mat["X"]), np.asarray(mat["y"]).reshape(-1)
    if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.shape[3] != len(y):
        raise DatasetNotFound(f"{path}: X is {x.shape} for {len(y)} labels, not (32, 32, 3, N).")
    if x.dtype != np.uint8:
        raise DatasetNotFound(f"{path}: X is {x.dtype}, not uint8.")
    y = y.astype(np.int64)
    if len(y) and (y.min() < 1 or y.max() > 10):
        raise DatasetNotFound(f"{path}: labels span {y.min()}..{y.max()}, not 1..10.")
    y[y == 10] = 0
    images = torch.from_numpy(np.ascontiguousarray(x.transpose(3, 2, 0, 1)))
    return images, torch.from_numpy(y)


def locate(root: Path, download: bool, split: str) -> Path:
    """The official file of `split` (checked by sha256), downloaded when allowed."""
    name, digest = FILES[split]
    folder = find_or_fetch("svhn", [Path(root) / FOLDER, SHARED], {name: digest}, URL, download, HOW)
    return folder / name


def load(split: str, root: Path, download: bool):
    """(images uint8 (N, 3, 32, 32), labels int64 (N,)): 73,257 for 'train', 26,032 for 'test'."""
    if split not in FILES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    return read_mat(locate(Path(root), download, split))


REGISTRY["svhn"] = load
