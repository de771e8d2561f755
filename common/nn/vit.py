"""The one ViT builder (timm), and an image classifier around it.

Every ViT here is timm's VisionTransformer; average pooling without a class token is the
Soft MoE paper's and VCAS's choice, `pool="token"` the original ViT's."""
from __future__ import annotations

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from common.data.transforms import to_signed


def build_vit(img_size: int, patch_size: int, in_chans: int, num_classes: int, dim: int, depth: int,
              heads: int, mlp_ratio: float = 4.0, pool: str = "avg") -> VisionTransformer:
    """timm ViT; num_classes=0 gives the pooled features (N, dim). pool: 'avg' | 'token'."""
    if pool not in ("avg", "token"):
        raise ValueError(f"pool must be 'avg' or 'token', got '{pool}'")
    if img_size % patch_size:
        raise ValueError(f"img_size {img_size} is not a multiple of patch_size {patch_size}")
    return VisionTransformer(img_size=img_size, patch_size=patch_size, in_chans=in_chans, num_classes=num_classes,
                             embed_dim=dim, depth=depth, num_heads=heads, mlp_ratio=mlp_ratio,
                             class_token=pool == "token", global_pool=pool)


class ViTClassifier(nn.Module):
    """A ViT on images stored as uint8 (or float in [0, 1]), mapped to [-1, 1]."""

    def __init__(self, img_size: int, in_chans: int, num_classes: int, patch_size: int = 16, dim: int = 384,
                 depth: int = 12, heads: int = 6, mlp_ratio: float = 4.0, pool: str = "avg"):
        super().__init__()
        self.vit = build_vit(img_size, patch_size, in_chans, num_classes, dim, depth, heads, mlp_ratio, pool)
        self.blocks = self.vit.blocks

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.vit(to_signed(images))
