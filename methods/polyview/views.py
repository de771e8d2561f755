"""M augmented views per image, and the compute-matched batch of the poly-view tables.

`multi_views` belongs beside `common.ssl.augment.two_views` (it uses only that module) and is
written so that it can move there unchanged.
"""
from __future__ import annotations

import torch
from einops import rearrange

from common.ssl.augment import apply, sample_params


def multi_views(images: torch.Tensor, views: int, cfg,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """M independent augmentations of every image: float (N, C, H, W) -> (N, M, C, H, W).

    One parameter set per view (N*M draws from the ranges in `cfg`, a `method.augment`
    config) and one `apply` over all N*M views. M = 2 is `two_views` in distribution.
    """
    if views < 1:
        raise ValueError(f"multi_views needs views >= 1, got {views}")
    n = images.shape[0]
    params = sample_params(n * views, cfg, images.device, generator=generator)
    out = apply(images.repeat_interleave(views, dim=0), params)           # ((N M), C, H, W), sample-major
    return rearrange(out, "(n m) c h w -> n m c h w", n=n, m=views)


def images_per_step(encoded_views: int, views: int) -> int:
    """Unique images per step N when every step encodes `encoded_views` = N*M views (the
    fixed compute budget of the paper's second finding: fewer samples, more views)."""
    if views < 2:
        raise ValueError(f"poly-view training needs views >= 2, got {views}")
    if encoded_views % views:
        raise ValueError(f"encoded views per step ({encoded_views}) must be a multiple of views ({views})")
    return encoded_views // views
