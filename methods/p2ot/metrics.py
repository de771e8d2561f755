"""Clustering metrics after Hungarian matching of clusters to classes (scikit-learn/scipy
underneath; to move to common/eval when a second method needs them)."""
from __future__ import annotations

import numpy as np
import torch


def _as_numpy(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def hungarian_match(pred, target, num_classes: int) -> np.ndarray:
    """mapping (num_classes,): cluster c -> the class it is matched to, one-to-one, maximising
    the number of samples whose matched class is their class (scipy linear_sum_assignment)."""
    from scipy.optimize import linear_sum_assignment
    from sklearn.metrics import confusion_matrix

    labels = np.arange(num_classes)
    counts = confusion_matrix(_as_numpy(pred), _as_numpy(target), labels=labels)  # (cluster, class)
    clusters, classes = linear_sum_assignment(counts, maximize=True)
    mapping = np.empty(num_classes, dtype=np.int64)
    mapping[clusters] = classes
    return mapping


def cluster_metrics(pred, target, num_classes: int) -> dict[str, float]:
    """acc (overall), macc (mean per-class recall: the official code's "ACC"), nmi, f1 (macro
    over the classes present in target or matched prediction), all in %, after matching."""
    from sklearn.metrics import f1_score, normalized_mutual_info_score, recall_score

    pred, target = _as_numpy(pred).astype(np.int64), _as_numpy(target).astype(np.int64)
    if pred.shape != target.shape or pred.ndim != 1:
        raise ValueError(f"pred and target must be 1-D of one length, got shapes {pred.shape} and {target.shape}")
    for name, x in (("pred", pred), ("target", target)):
        if x.size and (x.min() < 0 or x.max() >= num_classes):
            raise ValueError(f"{name} must lie in [0, {num_classes}), got values in [{x.min()}, {x.max()}]")
    matched = hungarian_match(pred, target, num_classes)[pred]
    present = np.unique(target)
    return {"acc": 100.0 * float(np.mean(matched == target)),
            "macc": 100.0 * float(recall_score(target, matched, labels=present, average="macro", zero_division=0)),
            "nmi": 100.0 * float(normalized_mutual_info_score(target, pred)),
            "f1": 100.0 * float(f1_score(target, matched, average="macro", zero_division=0))}


def sorted_sizes(labels, num_classes: int) -> np.ndarray:
    """Cluster (or class) sizes, largest first: the figure of predicted vs true sizes."""
    return np.sort(np.bincount(_as_numpy(labels).astype(np.int64), minlength=num_classes))[::-1]
