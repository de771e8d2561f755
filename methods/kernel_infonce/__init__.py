"""Kernel-InfoNCE: contrastive learning is spectral clustering on the similarity graph (ICLR 2024). See README.md."""
from __future__ import annotations

from methods.kernel_infonce.loss import KERNELS, kernel_infonce, kernel_loss_sum, log_kernel, squared_distances
from methods.kernel_infonce.model import OBJECTIVES, KernelInfoNCE
from methods.kernel_infonce.tuning import best_temperature, validation_splits

__all__ = ["KERNELS", "OBJECTIVES", "KernelInfoNCE", "best_temperature", "kernel_infonce", "kernel_loss_sum",
           "log_kernel", "squared_distances", "validation_splits"]
