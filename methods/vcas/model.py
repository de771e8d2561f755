"""Exact training, VCAS and the two sample-dropping baselines (UB, SB) behind one training_step.

A batch is either `(inputs, labels)` (images) or a dict with a "labels" key (HF encoders).
FLOPs are counted per block as the paper does: forward, activation-gradient and
weight-gradient passes are one unit each at exact, so a step costs 3 units per block.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from methods.vcas.controller import VarianceController
from methods.vcas.sampling import SamplingState, install

MODES = ("exact", "vcas", "ub", "sb")


def take(batch, idx: torch.Tensor):
    """The rows `idx` of every tensor in a tuple/dict batch."""
    if isinstance(batch, dict):
        return {k: v[idx] for k, v in batch.items()}
    return tuple(v[idx] for v in batch)


def to_device(batch, device):
    if isinstance(batch, dict):
        return {k: v.to(device) for k, v in batch.items()}
    return tuple(v.to(device) for v in batch)


def labels_of(batch) -> torch.Tensor:
    return batch["labels"] if isinstance(batch, dict) else batch[1]


class ViTClassifier(nn.Module):
    """A timm ViT with average pooling; images in [0, 255] or [0, 1] are mapped to [-1, 1]."""

    def __init__(self, cfg, img_size: int, in_chans: int, num_classes: int):
        super().__init__()
        self.vit = VisionTransformer(img_size=img_size, patch_size=cfg.patch_size, in_chans=in_chans,
                                     num_classes=num_classes, embed_dim=cfg.dim, depth=cfg.depth,
                                     num_heads=cfg.heads, mlp_ratio=4.0, class_token=False, global_pool="avg")
        self.blocks = self.vit.blocks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float() / 255 if x.dtype == torch.uint8 else x.float()
        return self.vit(x * 2 - 1)


class Sampled(nn.Module):
    """`net` maps a batch's inputs to logits; `blocks` are its repeated blocks (sampled in VCAS mode)."""

    def __init__(self, net: nn.Module, blocks: nn.Module, cfg):
        super().__init__()
        if cfg.mode not in MODES:
            raise ValueError(f"method.mode must be one of {MODES}, got '{cfg.mode}'")
        self.net, self.cfg, self.mode = net, cfg, cfg.mode
        self.num_blocks = len(blocks)
        self.state = SamplingState(self.num_blocks)
        self.controller = None
        if self.mode == "vcas":
            install(blocks, self.state)
            self.controller = VarianceController(self.state, cfg.tau_act, cfg.tau_w, cfg.alpha, cfg.beta,
                                                 cfg.m, cfg.nu_min)
        self.probe_fn = None   # step -> list of m minibatches for the controller (set by run())
        self.ctl_logs: dict[str, float] = {}   # the last controller update, logged at every step
        # controller state and FLOPs tallies are buffers so checkpoints resume them exactly
        self.register_buffer("rho", torch.ones(self.num_blocks, dtype=torch.float64))
        self.register_buffer("nu", torch.ones(self.num_blocks, dtype=torch.float64))
        self.register_buffer("s", torch.ones((), dtype=torch.float64))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("units", torch.zeros(2, dtype=torch.float64))  # (back-prop, total)

    def forward(self, batch) -> torch.Tensor:
        if isinstance(batch, dict):
            return self.net(**{k: v for k, v in batch.items() if k != "labels"}).logits
        return self.net(batch[0])

    def loss(self, batch, reduction: str = "mean") -> torch.Tensor:
        return F.cross_entropy(self(batch), labels_of(batch), reduction=reduction)

    # --- one training step -------------------------------------------------------------
    def training_step(self, batch):
        L, logs = self.num_blocks, {}
        if self.mode == "exact":
            loss, bp = self.loss(batch), 2.0 * L
            overhead = 0.0
        elif self.mode == "vcas":
            loss, bp, overhead, logs = self._vcas_step(batch)
        else:
            loss, bp, logs = self._drop_step(batch)
            overhead = 0.0
        self.steps += 1
        self.units += torch.tensor([bp, L + bp + overhead], dtype=torch.float64, device=self.units.device)
        return loss, logs

    def _vcas_step(self, batch):
        st, ctl, L, m = self.state, self.controller, self.num_blocks, self.cfg.m
        ctl.s, st.rho, st.nu = float(self.s), self.rho.tolist(), self.nu.tolist()
        overhead = 0.0
        if int(self.steps) % self.cfg.every == 0 and self.probe_fn is not None:
            params = [p for p in self.parameters() if p.requires_grad]
            rho_before = sum(st.rho)
            self.ctl_logs = ctl.step(self.loss, self.probe_fn(int(self.steps)), params)
            # m exact passes (3L) and m² SampleA-only passes (forward L + 2 × kept samples)
            overhead = m * 3 * L + m * m * (L + 2 * rho_before)
            self.s.fill_(ctl.s)
            self.rho.copy_(torch.tensor(st.rho))
            self.nu.copy_(torch.tensor(st.nu))
        st.sample_act, st.sample_w, st.record, st.measure_w = True, True, False, False
        bp = sum(r + r * n for r, n in zip(st.rho, st.nu))   # act-grad ρ_l, weight-grad ρ_l·ν_l
        logs = {**self.ctl_logs, "rho_mean": sum(st.rho) / L, "nu_mean": sum(st.nu) / L}
        return self.loss(batch), bp, overhead, logs

    def _drop_step(self, batch):
        """UB keeps a uniform third of the samples, SB the third with the largest loss; the
        mean over the kept third is the (UB: unbiased) estimate of the batch-mean loss."""
        n = len(labels_of(batch))
        k = max(1, round(n * self.cfg.keep))
        with torch.no_grad():
            per_sample = self.loss(batch, reduction="none")
        if self.mode == "ub":
            idx = torch.randperm(n, device=per_sample.device)[:k]
        else:
            idx = per_sample.topk(k).indices
        loss = self.loss(take(batch, idx))
        # logged as "loss" (it overrides the trainer's value) so all four curves show the full batch
        return loss, 2.0 * self.num_blocks * k / n, {"loss": per_sample.mean()}

    def flops_reduction(self) -> dict[str, float]:
        """Percent of back-propagation and of total training FLOPs saved (blocks only)."""
        steps, L = max(int(self.steps), 1), self.num_blocks
        bp, total = self.units.tolist()
        return {"bp_flops_reduction": 100 * (1 - bp / (2 * L * steps)),
                "flops_reduction": 100 * (1 - total / (3 * L * steps))}
