"""Anomaly detection: scores (higher = more anomalous) against labels (1 = anomaly)."""
from __future__ import annotations

import numpy as np


def _check(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels)
    if scores.shape != labels.shape:
        raise ValueError(f"{scores.shape} scores for {labels.shape} labels")
    if not np.isfinite(scores).all():
        raise ValueError("anomaly scores contain NaN or inf")
    if len(np.unique(labels)) != 2:
        raise ValueError("AUROC/AUPRC need both normal (0) and anomalous (1) samples")
    return scores, labels


def auroc(scores, labels) -> float:
    """Area under the ROC curve (scikit-learn roc_auc_score)."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(*_check(scores, labels)[::-1]))


def auprc(scores, labels) -> float:
    """Area under the precision-recall curve as average precision (scikit-learn), anomalies positive."""
    from sklearn.metrics import average_precision_score

    return float(average_precision_score(*_check(scores, labels)[::-1]))
