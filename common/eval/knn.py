"""Weighted cosine kNN of Wu et al. (2018), the SSL literature's kNN monitor: each of the k
nearest training features votes for its class with weight exp(cos / T). scikit-learn's
KNeighborsClassifier computes the same vote with weights=exp(-cosine distance / T) (the constant
exp(1/T) cancels); this torch version is the one fast enough for every table (a test checks
the two agree)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def knn_accuracy(train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor, test_y: torch.Tensor,
                 *, k: int, temperature: float, chunk: int = 1024) -> float:
    """Top-1 accuracy (%) of the weighted vote of the k nearest (cosine) training features."""
    if not 1 <= k <= len(train_x):
        raise ValueError(f"k must be in [1, {len(train_x)}] (the training set), got {k}")
    train_x, test_x = F.normalize(train_x, dim=1), F.normalize(test_x, dim=1)
    num_classes = int(train_y.max()) + 1
    correct = 0
    for i in range(0, len(test_x), chunk):
        sim = test_x[i:i + chunk] @ train_x.T                      # (c, N_train)
        top_sim, top_idx = sim.topk(k, dim=1)
        votes = torch.zeros(len(top_idx), num_classes)
        votes.scatter_add_(1, train_y[top_idx], (top_sim / temperature).exp())
        correct += int((votes.argmax(1) == test_y[i:i + chunk]).sum())
    return 100.0 * correct / len(test_x)
