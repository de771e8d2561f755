"""Image tensors between their stored and their model form: uint8 (N, C, H, W) in [0, 255] ->
float in [0, 1] (`to_float`) or in [-1, 1] (`to_signed`, what every image model here reads)."""
from __future__ import annotations

import torch


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 -> float in [0, 1]; float input is taken to be in [0, 1] already."""
    return images.float().div_(255.0) if images.dtype == torch.uint8 else images.float()


def to_signed(images: torch.Tensor) -> torch.Tensor:
    """uint8 or float in [0, 1] -> float in [-1, 1]."""
    return to_float(images) * 2.0 - 1.0
