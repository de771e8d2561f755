"""The evaluation stages a run calls: the one-class split of each table (drawn with the run seed,
with a validation part carved from the training side), one detector fitted and scored per table,
the suite's metrics (auprc_<name>, auroc_<name>, means), and, when a run scores several detectors,
the rank summary over tables (average rank, one-sided Wilcoxon p between every two detectors)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Literal

import numpy as np

from common.config import UserError
from common.data.adbench import load_adbench, one_class_splits
from common.data.tabular import load_tabular
from common.eval import auprc, auroc
from common.eval.ranks import average_ranks, wilcoxon_p

SOURCES = {"odds": load_tabular, "adbench": load_adbench}


def table_split(name: str, root: str | Path = "data", download: bool = False, max_train: int | None = None,
                seed: int = 0, on: Literal["test", "val"] = "test", source: str = "odds",
                val_share: float = 0.2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x_fit, x_eval, y_eval) of a table: `common.data.adbench.one_class_splits` drawn with `seed`
    (normal rows only in x_fit), scored on its 'test' or 'val' part. With `max_train`, a subsample
    (same seed) of the fitted rows; the evaluated rows are untouched."""
    if source not in SOURCES:
        raise UserError(f"dataset.name must be one of {', '.join(SOURCES)} for MCM, got '{source}'", exit_code=2)
    if on not in ("test", "val"):
        raise UserError(f"eval.on must be test or val, got '{on}'", exit_code=2)
    parts = one_class_splits(*SOURCES[source](name, root, download), seed=seed, val_share=val_share)
    x_fit = parts["fit"]
    if max_train is not None and len(x_fit) > max_train:
        keep = np.sort(np.random.default_rng(seed).choice(len(x_fit), max_train, replace=False))
        x_fit = x_fit[keep]
    return (x_fit, *parts[on])


def score_detector(detector, x_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
                   log: Callable[[dict], None] | None = None) -> dict[str, float]:
    """Fit on the normal training rows, score the evaluated rows: {'auprc', 'auroc'}. `log`
    receives the training curve of detectors that have one (MCM's per-epoch losses)."""
    scores = detector.fit(x_train, log=log).decision_function(x_test)
    return {"auprc": auprc(scores, y_test), "auroc": auroc(scores, y_test)}


def rank_summary(per_table: dict[str, dict[str, float]], names: list[str]) -> dict[str, float]:
    """per_table: detector -> {auprc_<table>: value}. Returns '<det>/rank_auprc' (average rank over
    the tables, 1 = best) and '<det>/wilcoxon_p_<other>' (one-sided: det's AUC-PR above other's
    over the tables) for every ordered pair of detectors."""
    scores = {det: [per_table[det][f"auprc_{t}"] for t in names] for det in per_table}
    out = {f"{det}/rank_auprc": r for det, r in average_ranks(scores).items()}
    for a in scores:
        for b in scores:
            if a != b:
                out[f"{a}/wilcoxon_p_{b}"] = wilcoxon_p(scores[a], scores[b], "greater")
    return out


def score_suite(make_detector: Callable[[], object], names: list[str], root: str | Path = "data",
                download: bool = False, max_train: dict[str, int] | None = None, seed: int = 0,
                num_features: dict[str, int] | None = None, log: Callable[[dict], None] | None = None,
                on: Literal["test", "val"] = "test", source: str = "odds", val_share: float = 0.2) -> dict[str, float]:
    """A fresh detector per table: auprc_<name>, auroc_<name>, and auprc_mean / auroc_mean over
    `names` (max_train: per-table cap on fitted rows, e.g. {'satellite': 1000}; num_features:
    the expected width of each table, checked when it loads)."""
    metrics: dict[str, float] = {}
    for name in names:
        split = table_split(name, root, download, (max_train or {}).get(name), seed, on, source, val_share)
        expected = (num_features or {}).get(name)
        if expected is not None and split[0].shape[1] != expected:
            raise UserError(f"table '{name}' has {split[0].shape[1]} features but dataset.num_features.{name} "
                            f"says {expected}", exit_code=2)
        for key, value in score_detector(make_detector(), *split, log=log).items():
            metrics[f"{key}_{name}"] = value
    for key in ("auprc", "auroc"):
        metrics[f"{key}_mean"] = float(np.mean([metrics[f"{key}_{name}"] for name in names]))
    return metrics
