"""A timm ViT whose MLPs in the last half of the blocks are replaced by a router + experts."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from common.data.transforms import to_signed
from common.nn import build_vit
from methods.soft_moe.layers import SoftMoE, normalised_entropy
from methods.soft_moe.routers import ExpertsChoice, SparseRouter, TokensChoice

MLP_INITS = ("timm", "fan_in")   # method.model.mlp_init; null keeps each MLP's own init (see MoEViT)
ROUTERS = ("dense", "soft", "soft_uniform", "uniform_soft", "uniform", "identity", "tokens_choice", "experts_choice")
SOFT_KINDS = {"soft": ("soft", "soft"), "soft_uniform": ("soft", "uniform"), "uniform_soft": ("uniform", "soft"),
              "uniform": ("uniform", "uniform"), "identity": ("identity", "identity")}   # (dispatch, combine)


def moe_layer(router: str, dim: int, num_experts: int, slots_per_expert: int, hidden: int,
              capacity_factor: float, group_size: int = 1, scale_init: float = 1.0,
              kernels: str = "reference") -> nn.Module:
    """The MoE that replaces a block's MLP; every router gets the same total slots/capacity,
    so FLOPs per image match the dense MLP when slots == tokens."""
    if router in SOFT_KINDS:
        dispatch, combine = SOFT_KINDS[router]
        return SoftMoE(dim, num_experts, slots_per_expert, hidden, dispatch, combine, scale_init, kernels)
    if router == "tokens_choice":
        return TokensChoice(dim, num_experts, capacity_factor, hidden, group_size)
    if router == "experts_choice":
        return ExpertsChoice(dim, num_experts, capacity_factor, hidden, group_size)
    raise ValueError(f"router must be one of {ROUTERS}, got '{router}'")


def init_weight(w: torch.Tensor, kind: str, fan_in: int) -> None:
    """timm's ViT init (`init_weights_vit_timm`: trunc_normal_, std 0.02, cut at ±2) or the
    experts' (U(±1/√fan_in), nn.Linear's default bound), in place."""
    if kind == "timm":
        nn.init.trunc_normal_(w, std=0.02)
    elif kind == "fan_in":
        bound = 1 / math.sqrt(fan_in)
        nn.init.uniform_(w, -bound, bound)
    else:
        raise ValueError(f"mlp_init must be one of {MLP_INITS}, got '{kind}'")


@torch.no_grad()
def init_mlps(blocks: nn.Module, kind: str) -> None:
    """Re-initialise every block's MLP, dense (fc1, fc2: weights (out, in)) or experts (w1, w2:
    (n, in, out) per expert), with `kind`; biases zero. Routers (Φ, scale, gates) are untouched."""
    for block in blocks:
        mlp = block.mlp
        if hasattr(mlp, "experts"):
            pairs = [(mlp.experts.w1, mlp.experts.b1), (mlp.experts.w2, mlp.experts.b2)]
            fans = [mlp.experts.w1.shape[1], mlp.experts.w2.shape[1]]
        else:
            pairs = [(mlp.fc1.weight, mlp.fc1.bias), (mlp.fc2.weight, mlp.fc2.bias)]
            fans = [mlp.fc1.weight.shape[1], mlp.fc2.weight.shape[1]]
        for (w, b), fan in zip(pairs, fans):
            init_weight(w, kind, fan)
            b.zero_()


class MoEViT(nn.Module):
    """ViT (timm) with average pooling; blocks [depth - moe_blocks, depth) get `moe_layer`.
    Defaults: the paper's Soft MoE-S/16 with 128 experts in the last half of the blocks.

    group_size: images per routing group of the sparse routers (V-MoE: 8); scale_init: Soft
    MoE's initial scale (official: 1); kernels: the Soft MoE layer's implementation
    ("reference" | "triton" | "auto", from `hardware.kernels`).

    mlp_init: one initialisation for the MLPs of the last `moe_blocks` blocks, whichever they
    hold (the dense MLP or every expert), so that Soft vs Dense compares routing, not
    initialisations (the first blocks' dense MLPs keep timm's init). None keeps each its
    own: timm's for the dense MLP (weights N(0, 0.02²) truncated at ±2, zero biases) and
    `Experts`' for the experts (weights U(±1/√fan_in), zero biases). "timm" / "fan_in": that
    one of the two for both (`init_mlps`)."""

    def __init__(self, img_size: int, in_chans: int, num_classes: int, router: str = "soft",
                 input_size: int | None = None, patch_size: int = 16, dim: int = 384, depth: int = 12,
                 heads: int = 6, mlp_ratio: float = 4.0, moe_blocks: int = 6, num_experts: int = 128,
                 slots_per_expert: int = 1, expert_mlp_ratio: float = 4.0, capacity_factor: float = 1.0,
                 aux_weight: float = 0.01, group_size: int = 8, scale_init: float = 1.0, kernels: str = "reference",
                 mlp_init: str | None = None):
        super().__init__()
        if router not in ROUTERS:
            raise ValueError(f"router must be one of {ROUTERS}, got '{router}'")
        if not 0 <= moe_blocks <= depth:
            raise ValueError(f"moe_blocks must be in [0, depth={depth}], got {moe_blocks}")
        if mlp_init is not None and mlp_init not in MLP_INITS:
            raise ValueError(f"mlp_init must be null or one of {MLP_INITS}, got '{mlp_init}'")
        self.router, self.aux_weight = router, aux_weight
        self.input_size = input_size or img_size
        self.vit = build_vit(self.input_size, patch_size, in_chans, num_classes, dim, depth, heads, mlp_ratio)
        if router != "dense":
            for block in self.vit.blocks[depth - moe_blocks:]:
                block.mlp = moe_layer(router, dim, num_experts, slots_per_expert, int(expert_mlp_ratio * dim),
                                      capacity_factor, group_size, scale_init, kernels)
        if mlp_init is not None:
            init_mlps(self.vit.blocks[depth - moe_blocks:], mlp_init)

    def moe_layers(self) -> list[nn.Module]:
        return [b.mlp for b in self.vit.blocks if not isinstance(b.mlp, nn.Sequential) and hasattr(b.mlp, "experts")]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = to_signed(images)
        if x.shape[-1] != self.input_size:  # paper-tier shapes: small images upsampled (e.g. 32 -> 224)
            x = F.interpolate(x, size=self.input_size, mode="bilinear", align_corners=False)
        return self.vit(x)

    @torch.no_grad()
    def routing_stats(self, images: torch.Tensor) -> dict[str, float]:
        """Per Soft MoE block i: the learned `scale_b{i}` and the normalised entropies (1 = uniform,
        0 = one-hot) of each slot's dispatch over tokens (`dispatch_entropy_b{i}`) and of each
        token's combine over slots (`combine_entropy_b{i}`) on `images`."""
        inputs: dict[int, torch.Tensor] = {}
        hooks = [block.mlp.register_forward_hook(lambda mod, args, out, i=i: inputs.__setitem__(i, args[0]))
                 for i, block in enumerate(self.vit.blocks) if isinstance(block.mlp, SoftMoE)]
        try:
            self(images)
        finally:
            for h in hooks:
                h.remove()
        stats = {}
        for i, x in sorted(inputs.items()):
            layer = self.vit.blocks[i].mlp
            dispatch, combine = layer.weights(x)
            stats[f"scale_b{i}"] = float(layer.scale)
            stats[f"dispatch_entropy_b{i}"] = float(normalised_entropy(dispatch, axis=1))
            stats[f"combine_entropy_b{i}"] = float(normalised_entropy(combine, axis=2))
        return stats

    def training_step(self, batch):
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        logs = {"acc": (logits.argmax(1) == labels).float().mean()}
        sparse = [m for m in self.moe_layers() if isinstance(m, SparseRouter)]
        if sparse:
            aux = torch.stack([m.aux_loss for m in sparse]).sum()
            loss = loss + self.aux_weight * aux
            logs["aux_loss"] = aux.detach()
            logs["dropped"] = torch.stack([m.dropped for m in sparse]).mean().detach()
            self.last_dropped = logs["dropped"]   # the share of tokens the last step dropped
        return loss, logs
