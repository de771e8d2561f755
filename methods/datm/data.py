"""Digits for distillation: float images in [0, 1], standardised (or ZCA-whitened) with the
statistics of the images the experts train on; 20% of train held out as validation for tuning."""
from __future__ import annotations

import torch

from common import data
from common.distill import ZCA


def distill_splits(name: str, root: str, download: bool, eval_on: str = "test", val_share: float = 0.2,
                   preprocess: str = "standardize", zca_eps: float = 0.1):
    """((x_fit, y_fit), (x_eval, y_eval)): the images experts and distillation see, and the images
    accuracy is measured on (test split, or the validation part of train when eval_on = val)."""
    if eval_on not in ("test", "val"):
        raise ValueError(f"eval_on must be 'test' or 'val', got '{eval_on}'")
    if preprocess not in ("standardize", "zca"):
        raise ValueError(f"preprocess must be 'standardize' or 'zca', got '{preprocess}'")
    if name == "tinyimagenet":   # the paper tier's; the loader registers itself on import (as krr_st's)
        import common.data.tinyimagenet  # noqa: F401
    x, y = data.load(name, "train", root, download)
    if eval_on == "val":
        if not 0 < val_share < 1:
            raise ValueError(f"val_share must lie in (0, 1), got {val_share}")
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        cut = len(y) - int(round(val_share * len(y)))
        (x, y), (xe, ye) = (x[order[:cut]], y[order[:cut]]), (x[order[cut:]], y[order[cut:]])
    else:
        xe, ye = data.load(name, "test", root, download)
    x, xe = x.float() / 255.0, xe.float() / 255.0
    if preprocess == "zca":
        zca = ZCA().fit(x, eps=zca_eps)
        return (zca.transform(x), y), (zca.transform(xe), ye)
    mean = x.mean(dim=(0, 2, 3), keepdim=True)
    std = x.std(dim=(0, 2, 3), keepdim=True)
    return ((x - mean) / std, y), ((xe - mean) / std, ye)
