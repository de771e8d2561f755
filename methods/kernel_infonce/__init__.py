"""Kernel-InfoNCE: contrastive learning is spectral clustering on the similarity graph (ICLR 2024). See README.md."""
from __future__ import annotations

from hydra.utils import instantiate

from common import data, tasks
from common.data import tinyimagenet  # noqa: F401  (registers "tinyimagenet" in common.data.REGISTRY)
from common.instantiate import instantiate_checked
from methods.kernel_infonce.loss import KERNELS, kernel_infonce, kernel_loss_sum, log_kernel, squared_distances
from methods.kernel_infonce.model import OBJECTIVES, KernelInfoNCE


def build(cfg) -> KernelInfoNCE:
    """The model from the config alone (no data): encoder + projector with the chosen kernel.
    A bad kernel argument (unknown kernel, gamma outside (0, 2], odd proj_dim for concat_sum, a
    key the kernel does not read) is a config error naming it."""
    encoder, feat_dim = instantiate(cfg.method.backbone, in_chans=cfg.dataset.in_chans, img_size=cfg.dataset.img_size)
    return instantiate_checked(cfg.method.model, "method.model", encoder=encoder, feat_dim=feat_dim)


def run(cfg, ctx) -> dict[str, float]:
    """SimCLR pre-training with the kernel's InfoNCE, then linear-probe and kNN accuracy of frozen
    features (`eval.on: val` scores on a held-out part of eval_train: the tau sweep)."""
    return tasks.contrastive(ctx, build(cfg), data.image_splits(cfg.dataset), cfg.eval)


__all__ = ["KERNELS", "OBJECTIVES", "KernelInfoNCE", "build", "kernel_infonce", "kernel_loss_sum", "log_kernel",
           "run", "squared_distances"]
