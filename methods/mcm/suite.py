"""The evaluation stages a run calls: the fixed one-class split of each table, one detector
fitted and scored per table, and the suite's metrics (auprc_<name>, auroc_<name>, means)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from common.config import UserError
from common.data.tabular import load_tabular, one_class_split
from common.eval import auprc, auroc


def table_split(name: str, root: str | Path = "data", download: bool = False, max_train: int | None = None,
                split_seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, x_test, y_test) of a table, the same for every run seed; with `max_train`,
    a fixed subsample (default_rng(split_seed)) of the training half, the test half untouched."""
    x_train, x_test, y_test = one_class_split(*load_tabular(name, root, download), seed=split_seed)
    if max_train is not None and len(x_train) > max_train:
        keep = np.sort(np.random.default_rng(split_seed).choice(len(x_train), max_train, replace=False))
        x_train = x_train[keep]
    return x_train, x_test, y_test


def score_detector(detector, x_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
                   log: Callable[[dict], None] | None = None) -> dict[str, float]:
    """Fit on the normal training rows, score the test rows: {'auprc', 'auroc'}. `log` receives
    the training curve of detectors that have one (MCM's per-epoch losses)."""
    scores = detector.fit(x_train, log=log).decision_function(x_test)
    return {"auprc": auprc(scores, y_test), "auroc": auroc(scores, y_test)}


def score_suite(make_detector: Callable[[], object], names: list[str], root: str | Path = "data",
                download: bool = False, max_train: dict[str, int] | None = None, split_seed: int = 0,
                num_features: dict[str, int] | None = None,
                log: Callable[[dict], None] | None = None) -> dict[str, float]:
    """A fresh detector per table: auprc_<name>, auroc_<name>, and auprc_mean / auroc_mean over
    `names` (max_train: per-table cap on training rows, e.g. {'satellite': 2000}; num_features:
    the expected width of each table, checked when it loads)."""
    metrics: dict[str, float] = {}
    for name in names:
        split = table_split(name, root, download, (max_train or {}).get(name), split_seed)
        expected = (num_features or {}).get(name)
        if expected is not None and split[0].shape[1] != expected:
            raise UserError(f"table '{name}' has {split[0].shape[1]} features but dataset.num_features.{name} "
                            f"says {expected}", exit_code=2)
        for key, value in score_detector(make_detector(), *split, log=log).items():
            metrics[f"{key}_{name}"] = value
    for key in ("auprc", "auroc"):
        metrics[f"{key}_mean"] = float(np.mean([metrics[f"{key}_{name}"] for name in names]))
    return metrics
