"""Poly-view contrastive learning (Shidani et al., ICLR 2024). See README.md."""
from __future__ import annotations

from methods.polyview.loss import (LOSSES, arithmetic_pvc, geometric_pvc, multi_crop, pair_log_likelihoods,
                                   poly_view_loss, sufficient_statistics)
from methods.polyview.model import PolyView
from methods.polyview.views import images_per_step, multi_views

__all__ = ["LOSSES", "PolyView", "arithmetic_pvc", "geometric_pvc", "images_per_step", "multi_crop",
           "multi_views", "pair_log_likelihoods", "poly_view_loss", "sufficient_statistics"]
