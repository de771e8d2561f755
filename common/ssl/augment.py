"""Batched, per-sample image augmentations with explicit parameters.

torchvision.transforms.v2 draws one set of parameters per call, so a batch would share a
single crop; contrastive learning needs a different crop per image, and CARE needs to
*choose* the parameters (one pair per chunk) and to know them (the sensitivity probe).
So parameters are sampled as tensors and applied in one `grid_sample` for the whole batch.
Images are float in [0, 1], shape (N, C, H, W).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from einops import rearrange


@dataclass(frozen=True)
class Augment:
    """The ranges augmentations are drawn from (SimCLR's defaults, Chen et al. 2020 App. A;
    no colour drop or blur: the CPU tiers use grey images)."""
    min_scale: float = 0.08    # random-resized crop keeps [min_scale, 1] of the area
    flip_prob: float = 0.5     # horizontal flip
    jitter_prob: float = 0.8   # brightness/contrast jitter applied with this probability ...
    brightness: float = 0.4    # ... factor uniform in [1 - b, 1 + b]
    contrast: float = 0.4

    def __post_init__(self):
        for name in ("min_scale", "flip_prob", "jitter_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"Augment.{name} must be in [0, 1], got {getattr(self, name)}")
        if self.min_scale <= 0 or self.brightness < 0 or self.contrast < 0:
            raise ValueError(f"Augment needs min_scale > 0 and brightness, contrast >= 0, got {self}")


@dataclass
class AugParams:
    """One augmentation per sample; every field has shape (N,)."""
    scale: torch.Tensor      # area fraction kept by the crop
    log_ratio: torch.Tensor  # log aspect ratio of the crop
    cx: torch.Tensor         # crop centre in [-1, 1] units of the free margin
    cy: torch.Tensor
    flip: torch.Tensor       # +1 or -1 (horizontal flip)
    brightness: torch.Tensor  # multiplicative factor
    contrast: torch.Tensor    # factor around the image mean

    def __len__(self) -> int:
        return self.scale.shape[0]

    def __getitem__(self, index) -> "AugParams":
        """The parameter sets at `index` (an int keeps a length-1 batch)."""
        if isinstance(index, int):
            index = slice(index, index + 1)
        return AugParams(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @staticmethod
    def identity(n: int, device="cpu") -> "AugParams":
        """Parameters that leave images unchanged (full crop, no flip, factors 1)."""
        ones, zeros = torch.ones(n, device=device), torch.zeros(n, device=device)
        return AugParams(scale=ones, log_ratio=zeros, cx=zeros, cy=zeros, flip=ones.clone(),
                         brightness=ones.clone(), contrast=ones.clone())

    def repeat_interleave(self, n: int) -> "AugParams":
        """Each parameter set repeated n times: K sets -> K*n samples (CARE's chunks)."""
        return AugParams(**{f.name: getattr(self, f.name).repeat_interleave(n) for f in fields(self)})


def sample_params(n: int, cfg: Augment, device="cpu", generator: torch.Generator | None = None) -> AugParams:
    """Draw n parameter sets from the ranges of an `Augment`."""
    def uniform(lo, hi):
        return lo + (hi - lo) * torch.rand(n, device=device, generator=generator)

    jitter = torch.rand(n, device=device, generator=generator) < cfg.jitter_prob
    brightness = torch.where(jitter, uniform(1 - cfg.brightness, 1 + cfg.brightness), torch.ones(n, device=device))
    contrast = torch.where(jitter, uniform(1 - cfg.contrast, 1 + cfg.contrast), torch.ones(n, device=device))
    flip = torch.where(torch.rand(n, device=device, generator=generator) < cfg.flip_prob, -1.0, 1.0)
    return AugParams(scale=uniform(cfg.min_scale, 1.0),
                     log_ratio=uniform(math.log(3 / 4), math.log(4 / 3)),
                     cx=uniform(-1.0, 1.0), cy=uniform(-1.0, 1.0), flip=flip,
                     brightness=brightness, contrast=contrast)


def apply(images: torch.Tensor, p: AugParams) -> torch.Tensor:
    """Random-resized crop + flip (one affine grid_sample), then brightness and contrast."""
    n = images.shape[0]
    ratio = p.log_ratio.exp()
    # crop half-extents in normalised coordinates, never larger than the image
    sx = (p.scale * ratio).sqrt().clamp(max=1.0)
    sy = (p.scale / ratio).sqrt().clamp(max=1.0)
    theta = torch.zeros(n, 2, 3, device=images.device, dtype=images.dtype)
    theta[:, 0, 0] = sx * p.flip
    theta[:, 1, 1] = sy
    theta[:, 0, 2] = p.cx * (1 - sx)
    theta[:, 1, 2] = p.cy * (1 - sy)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    out = F.grid_sample(images, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
    out = out * p.brightness.view(n, 1, 1, 1)
    mean = out.mean(dim=(1, 2, 3), keepdim=True)
    out = (out - mean) * p.contrast.view(n, 1, 1, 1) + mean
    return out.clamp(0.0, 1.0)


def two_views(images: torch.Tensor, cfg: Augment) -> tuple[torch.Tensor, torch.Tensor]:
    """The SimCLR pair: two independent augmentations of every image."""
    n = images.shape[0]
    return (apply(images, sample_params(n, cfg, images.device)),
            apply(images, sample_params(n, cfg, images.device)))


def multi_views(images: torch.Tensor, views: int, cfg: Augment,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """M independent augmentations of every image: float (N, C, H, W) -> (N, M, C, H, W).

    One parameter set per view (N*M draws from the ranges of `cfg`) and one `apply` over all
    N*M views (poly-view contrastive learning). M = 2 is `two_views` in distribution.
    """
    if views < 1:
        raise ValueError(f"multi_views needs views >= 1, got {views}")
    n = images.shape[0]
    params = sample_params(n * views, cfg, images.device, generator=generator)
    out = apply(images.repeat_interleave(views, dim=0), params)           # ((N M), C, H, W), sample-major
    return rearrange(out, "(n m) c h w -> n m c h w", n=n, m=views)
