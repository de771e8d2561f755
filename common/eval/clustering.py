"""Clustering against classes: Hungarian matching (scipy), then accuracy, mean per-class accuracy,
macro-F1; and the matching-free NMI and ARI (scikit-learn). Percentages."""
from __future__ import annotations

import numpy as np


def _np(x) -> np.ndarray:
    return np.asarray(x.cpu() if hasattr(x, "cpu") else x).astype(np.int64)


def match_clusters(pred, target, num_classes: int) -> np.ndarray:
    """mapping[c] = the class cluster c is matched to, maximising the matched count (each class
    used once; clusters beyond the classes map to -1)."""
    from scipy.optimize import linear_sum_assignment

    pred, target = _np(pred), _np(target)
    size = max(num_classes, int(pred.max()) + 1, int(target.max()) + 1)
    counts = np.zeros((size, size), dtype=np.int64)
    np.add.at(counts, (pred, target), 1)
    rows, cols = linear_sum_assignment(counts, maximize=True)
    mapping = np.full(size, -1)
    mapping[rows] = cols
    return mapping


def cluster_accuracy(pred, target, num_classes: int) -> float:
    mapped = match_clusters(pred, target, num_classes)[_np(pred)]
    return float(100.0 * np.mean(mapped == _np(target)))


def nmi(pred, target) -> float:
    from sklearn.metrics import normalized_mutual_info_score

    return float(100.0 * normalized_mutual_info_score(_np(target), _np(pred)))


def ari(pred, target) -> float:
    from sklearn.metrics import adjusted_rand_score

    return float(100.0 * adjusted_rand_score(_np(target), _np(pred)))


def cluster_metrics(pred, target, num_classes: int) -> dict[str, float]:
    """acc (matched), macc (mean per-class recall after matching), nmi, ari, f1 (macro, matched)."""
    from sklearn.metrics import balanced_accuracy_score, f1_score

    target = _np(target)
    mapped = match_clusters(pred, target, num_classes)[_np(pred)]
    return {"acc": float(100.0 * np.mean(mapped == target)),
            "macc": float(100.0 * balanced_accuracy_score(target, mapped)),
            "nmi": nmi(pred, target), "ari": ari(pred, target),
            "f1": float(100.0 * f1_score(target, mapped, average="macro",
                                         labels=np.arange(num_classes), zero_division=0))}
