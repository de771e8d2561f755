"""Frozen-feature evaluation: feature extraction, linear probe, weighted kNN."""
from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.nn.functional as F


@torch.no_grad()
def extract(fn, images: torch.Tensor, batch_size: int = 1024, device="cpu") -> torch.Tensor:
    """Apply `fn` (uint8 images -> features) in batches; return float features on the CPU."""
    outs = [fn(images[i:i + batch_size].to(device)).float().cpu() for i in range(0, len(images), batch_size)]
    return torch.cat(outs)


def linear_probe(train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor,
                 test_y: torch.Tensor, max_iter: int = 500, seed: int = 0) -> float:
    """Top-1 accuracy (%) of a multinomial logistic regression on standardised frozen features."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(train_x.numpy())
    clf = LogisticRegression(max_iter=max_iter, random_state=seed)
    with warnings.catch_warnings():
        # a probe stopped at max_iter is still a fixed, comparable protocol across methods
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(scaler.transform(train_x.numpy()), train_y.numpy())
    pred = clf.predict(scaler.transform(test_x.numpy()))
    return float(100.0 * np.mean(pred == test_y.numpy()))


def knn_accuracy(train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor,
                 test_y: torch.Tensor, k: int = 20, temperature: float = 0.07,
                 chunk: int = 1024) -> float:
    """Top-1 accuracy (%) of cosine kNN with exp(sim / T) weighted votes (Wu et al. 2018)."""
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
