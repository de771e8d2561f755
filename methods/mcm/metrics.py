"""AUC-PR (the paper's headline metric) and AUROC: thin wrappers over scikit-learn, shared
with other anomaly-detection methods later (common/eval)."""
from __future__ import annotations

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score


def _check(y_true, scores) -> tuple[np.ndarray, np.ndarray]:
    y_true, scores = np.asarray(y_true), np.asarray(scores, dtype=np.float64)
    if y_true.shape != scores.shape:
        raise ValueError(f"labels {y_true.shape} and scores {scores.shape} differ in shape.")
    if len(np.unique(y_true)) != 2:
        raise ValueError("AUROC/AUC-PR need both normal (0) and anomalous (1) rows among the labels.")
    if not np.isfinite(scores).all():
        raise ValueError("anomaly scores contain NaN or inf.")
    return y_true, scores


def auprc(y_true, scores) -> float:
    """Area under the precision-recall curve as average precision (the official utils.py)."""
    return float(average_precision_score(*_check(y_true, scores)))


def auroc(y_true, scores) -> float:
    return float(roc_auc_score(*_check(y_true, scores)))
