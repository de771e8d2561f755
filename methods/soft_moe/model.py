"""A timm ViT whose MLPs in the last half of the blocks are replaced by a router + experts."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from common.ssl import to_float
from methods.soft_moe.layers import SoftMoE
from methods.soft_moe.routers import ExpertsChoice, SparseRouter, TokensChoice

ROUTERS = ("dense", "soft", "soft_uniform", "uniform_soft", "uniform", "identity", "tokens_choice", "experts_choice")


def moe_layer(router: str, dim: int, cfg) -> nn.Module:
    """The MoE that replaces a block's MLP; every router gets the same total slots/capacity,
    so FLOPs per image match the dense MLP when slots == tokens."""
    hidden = int(cfg.expert_mlp_ratio * dim)
    if router in ("soft", "soft_uniform", "uniform_soft", "uniform", "identity"):
        dispatch, combine = {"soft": ("soft", "soft"), "soft_uniform": ("soft", "uniform"),
                             "uniform_soft": ("uniform", "soft"), "uniform": ("uniform", "uniform"),
                             "identity": ("identity", "identity")}[router]
        return SoftMoE(dim, cfg.num_experts, cfg.slots_per_expert, hidden, dispatch, combine)
    if router == "tokens_choice":
        return TokensChoice(dim, cfg.num_experts, cfg.capacity_factor, hidden)
    if router == "experts_choice":
        return ExpertsChoice(dim, cfg.num_experts, cfg.capacity_factor, hidden)
    raise ValueError(f"router must be one of {ROUTERS}, got '{router}'")


class MoEViT(nn.Module):
    """ViT (timm) with average pooling; blocks [depth - moe_blocks, depth) get `moe_layer`."""

    def __init__(self, cfg, img_size: int, in_chans: int, num_classes: int):
        super().__init__()
        self.cfg = cfg
        self.input_size = cfg.input_size or img_size
        self.vit = VisionTransformer(img_size=self.input_size, patch_size=cfg.patch_size, in_chans=in_chans,
                                     num_classes=num_classes, embed_dim=cfg.dim, depth=cfg.depth,
                                     num_heads=cfg.heads, mlp_ratio=cfg.mlp_ratio, class_token=False,
                                     global_pool="avg")
        if cfg.router != "dense":
            for block in self.vit.blocks[cfg.depth - cfg.moe_blocks:]:
                block.mlp = moe_layer(cfg.router, cfg.dim, cfg)

    def moe_layers(self) -> list[nn.Module]:
        return [b.mlp for b in self.vit.blocks if not isinstance(b.mlp, nn.Sequential) and hasattr(b.mlp, "experts")]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = to_float(images) * 2 - 1
        if x.shape[-1] != self.input_size:  # paper-tier shapes: small images upsampled (e.g. 32 -> 224)
            x = F.interpolate(x, size=self.input_size, mode="bilinear", align_corners=False)
        return self.vit(x)

    def training_step(self, batch):
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        logs = {"acc": (logits.argmax(1) == labels).float().mean()}
        sparse = [m for m in self.moe_layers() if isinstance(m, SparseRouter)]
        if sparse:
            aux = torch.stack([m.aux_loss for m in sparse]).sum()
            loss = loss + self.cfg.aux_weight * aux
            logs["aux_loss"] = aux.detach()
            logs["dropped"] = torch.stack([m.dropped for m in sparse]).mean().detach()
        return loss, logs
