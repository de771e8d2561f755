"""MCM: Masked Cell Modeling for anomaly detection in tabular data (ICLR 2024). See README.md."""
from __future__ import annotations

from methods.mcm.baselines import MCM_ROWS, PYOD, StandardizedBaseline, make_detector
from methods.mcm.detector import MCMDetector
from methods.mcm.loss import anomaly_score, diversity_loss, mcm_loss, reconstruction_loss
from methods.mcm.metrics import auprc, auroc
from methods.mcm.model import MCM, FixedMasks, MaskGenerator
from methods.mcm.suite import score_detector, score_suite, table_split

__all__ = ["MCM", "MCMDetector", "MCM_ROWS", "PYOD", "FixedMasks", "MaskGenerator", "StandardizedBaseline",
           "anomaly_score", "auprc", "auroc", "diversity_loss", "make_detector", "mcm_loss", "reconstruction_loss",
           "score_detector", "score_suite", "table_split"]
