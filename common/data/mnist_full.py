"""MNIST (LeCun et al. 1998), all 60k/10k images, through torchvision's loader (its layout
<data root>/MNIST/raw, downloaded there with download=true and checked by torchvision's md5s).
Registered as `mnist` by importing this module (a new dataset goes in a new module: the shared
registry is in every table's fingerprint)."""
from __future__ import annotations

from pathlib import Path

import torch

from common.data import REGISTRY
from common.data.download import DatasetNotFound


def load(split: str, root: Path, download: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(images uint8 (N, 1, 28, 28), labels int64 (N,))."""
    from torchvision.datasets import MNIST

    try:
        ds = MNIST(str(root), train=split == "train", download=download)
    except RuntimeError as err:
        raise DatasetNotFound(f"dataset 'mnist' not found in {Path(root) / 'MNIST' / 'raw'} ({err}); rerun with "
                              f"dataset.download=true on a machine with internet") from None
    return ds.data.unsqueeze(1).clone(), ds.targets.long().clone()


REGISTRY.setdefault("mnist", load)
