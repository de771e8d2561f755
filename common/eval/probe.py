"""Linear probe: multinomial logistic regression (scikit-learn) on standardised frozen features."""
from __future__ import annotations

import warnings

import numpy as np
import torch


def linear_probe(train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor, test_y: torch.Tensor,
                 *, max_iter: int, C: float, seed: int) -> float:
    """Top-1 accuracy (%) on the test features; `seed` must be >= 0 (scikit-learn's random_state)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    scaler = StandardScaler().fit(train_x.numpy())
    clf = LogisticRegression(max_iter=max_iter, C=C, random_state=seed)
    with warnings.catch_warnings():
        # a probe stopped at max_iter is still a fixed, comparable protocol across methods
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(scaler.transform(train_x.numpy()), train_y.numpy())
    pred = clf.predict(scaler.transform(test_x.numpy()))
    return float(100.0 * np.mean(pred == test_y.numpy()))
