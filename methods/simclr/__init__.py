"""SimCLR, the contrastive baseline that CARE and NCL build on. See README.md."""
from __future__ import annotations

from common.ssl import run_contrastive
from methods.simclr.model import SimCLR


def run(cfg) -> dict[str, float]:
    """Pre-train on the train split, then linear-probe and kNN accuracy of frozen features."""
    return run_contrastive(cfg, SimCLR)


__all__ = ["SimCLR", "run"]
