"""Colour for grey images: each image tinted by its own hue (an attribute the labels do not
depend on), and the hue shift of colour jitter as a rotation of RGB about the grey axis.

Colour lives in RGB as a grey axis u0 = (1, 1, 1)/√3 and the chroma plane spanned by the
orthonormal e1, e2 (both ⟂ u0). A hue is an angle h in that plane; the tint of hue h is
    c(h) = ½·(1, 1, 1) + r (cos h · e1 + sin h · e2),    r = 0.6,
and a grey pixel g in [0, 1] becomes g·c(h), which lies in [0, 1]³ for every h (each
component of cos h e1 + sin h e2 is at most √(2/3) in size, and ½ + 0.6·√(2/3) < 1).
A hue shift by θ is the rotation about u0 by θ (`rotate_hue`); it maps g·c(h) to g·c(h + θ)
exactly, so a colour-jitter hue change of a tinted image is again a tinted image.
The hue of an image is the angle of its mean colour in the chroma plane (`hue_of`): for
g·c(h) that is h whatever g is, and brightness/contrast changes (which move colours along
u0 or scale them) leave it unchanged.
"""
from __future__ import annotations

import math

import torch
from einops import einsum, reduce

CHROMA = 0.6
_U0 = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64) / math.sqrt(3.0)
_E1 = torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64) / math.sqrt(2.0)
_E2 = torch.tensor([1.0, 1.0, -2.0], dtype=torch.float64) / math.sqrt(6.0)
HUE_SEEDS = {"train": 11, "eval_train": 12, "test": 13}  # fixed: a hue belongs to the data, not to a run


def tint_colour(hue: torch.Tensor) -> torch.Tensor:
    """c(h): hue (N,) radians -> RGB colour (N, 3) in [0, 1]."""
    e1, e2 = _E1.to(hue.device, hue.dtype), _E2.to(hue.device, hue.dtype)
    return 0.5 + CHROMA * (torch.cos(hue)[:, None] * e1 + torch.sin(hue)[:, None] * e2)


def tint(grey: torch.Tensor, hue: torch.Tensor) -> torch.Tensor:
    """uint8 grey images (N, 1, H, W) -> uint8 RGB images (N, 3, H, W), pixel g -> g·c(h_n)."""
    if grey.shape[1] != 1:
        raise ValueError(f"tint takes grey images (N, 1, H, W), got shape {tuple(grey.shape)}")
    colour = tint_colour(hue.float())                                    # (N, 3)
    rgb = grey.float() * colour[:, :, None, None]                         # (N, 3, H, W)
    return rgb.round().clamp(0, 255).to(torch.uint8)


def hue_of(images: torch.Tensor) -> torch.Tensor:
    """Hue angle in (-π, π] of each image's mean colour: float or uint8 (N, 3, H, W) -> (N,)."""
    mean = reduce(images.double(), "n c h w -> n c", "mean")
    return torch.atan2(mean @ _E2.to(mean.device), mean @ _E1.to(mean.device)).float()


def hue_rotation(angle: torch.Tensor) -> torch.Tensor:
    """The rotation of RGB about the grey axis by `angle` (N,): (N, 3, 3)."""
    u0, e1, e2 = (v.to(angle.device, angle.dtype) for v in (_U0, _E1, _E2))
    cos, sin = torch.cos(angle)[:, None, None], torch.sin(angle)[:, None, None]
    plane = torch.outer(e1, e1) + torch.outer(e2, e2)
    turn = torch.outer(e2, e1) - torch.outer(e1, e2)                      # e1 -> e2, e2 -> -e1
    return torch.outer(u0, u0) + cos * plane + sin * turn


def rotate_hue(images: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Shift the hue of float RGB images (N, 3, H, W) in [0, 1] by `angle` (N,) radians."""
    if images.shape[1] != 3:
        raise ValueError(f"a hue shift needs RGB images (N, 3, H, W), got shape {tuple(images.shape)}")
    out = einsum(hue_rotation(angle.to(images.dtype)), images, "n i j, n j h w -> n i h w")
    return out.clamp(0.0, 1.0)


def tint_splits(splits: dict[str, tuple]) -> dict[str, tuple]:
    """Tint every split of `common.data.image_splits`: image n of a split gets hue h_n ~ U[0, 2π)
    from a generator fixed per split, so every run and every row sees the same tints."""
    out = {}
    for name, (images, labels) in splits.items():
        gen = torch.Generator().manual_seed(HUE_SEEDS[name])
        out[name] = (tint(images, 2 * math.pi * torch.rand(len(images), generator=gen)), labels)
    return out
