"""The table's rows as detectors with one interface (fit on normal rows, decision_function
higher = more anomalous): MCM and its ablations, and pyod's baselines on standardised input."""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from methods.mcm.detector import MCMDetector, check_rows

PYOD = ("iforest", "lof", "ocsvm", "ecod", "deepsvdd", "dif")
TRIVIAL = ("mean_distance",)
# MCM rows: keyword overrides of MCMDetector's settings (the run's method.model block)
MCM_ROWS = {
    "mcm": {},
    "mcm_no_div": {"lambda_div": 0.0},
    "mcm_logits": {"diversity_on": "logits"},
    "mcm_k1": {"num_masks": 1, "lambda_div": 0.0},
    "mcm_k5": {"num_masks": 5},
    "mcm_k30": {"num_masks": 30},
    "ae": {"num_masks": 1, "lambda_div": 0.0, "masking": "none"},
    "random_masks": {"lambda_div": 0.0, "masking": "random", "mask_ratio": 0.5},
    "untrained": {"epochs": 0},          # MCM as initialised: the score of a model that learned nothing
}


@contextlib.contextmanager
def seeded(seed: int):
    """Seed torch's and numpy's global generators for the block, then restore them: pyod's
    DeepSVDD and DIF draw from both (np.random.shuffle, torch.manual_seed in __init__)."""
    state = np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        np.random.seed(seed)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            np.random.set_state(state)


def pyod_detector(name: str, seed: int, num_features: int):
    """pyod (pinned 3.6.7 in the tabular extra) with its defaults; fixed seeds."""
    if name == "iforest":
        from pyod.models.iforest import IForest
        return IForest(random_state=seed)
    if name == "lof":
        from pyod.models.lof import LOF
        return LOF()
    if name == "ocsvm":
        from pyod.models.ocsvm import OCSVM
        return OCSVM()
    if name == "ecod":
        from pyod.models.ecod import ECOD
        return ECOD()
    if name == "deepsvdd":
        from pyod.models.deep_svdd import DeepSVDD
        return DeepSVDD(n_features=num_features, random_state=seed, verbose=0)
    if name == "dif":
        from pyod.models.dif import DIF
        return DIF(random_state=seed, device="cpu")
    raise ValueError(f"unknown baseline '{name}'; choose from {', '.join(PYOD)}.")


class StandardizedBaseline:
    """A pyod detector fitted on training-standardised rows (the same input MCM sees)."""

    def __init__(self, name: str, seed: int = 0):
        self.name, self.seed = name, seed
        pyod_detector(name, seed, 1)   # unknown names fail here, before any data is read

    def fit(self, x, y=None, log=None) -> "StandardizedBaseline":
        """`log` is accepted for MCMDetector's interface; pyod's fit has no curve to report."""
        x = check_rows(x).astype(np.float64)
        self.mean_, std = x.mean(0), x.std(0)
        self.std_ = np.where(std > 0, std, 1.0)
        with seeded(self.seed):
            self.detector_ = pyod_detector(self.name, self.seed, x.shape[1]).fit((x - self.mean_) / self.std_)
        return self

    def decision_function(self, x) -> np.ndarray:
        x = check_rows(x, len(self.mean_)).astype(np.float64)
        with seeded(self.seed):
            return np.asarray(self.detector_.decision_function((x - self.mean_) / self.std_), dtype=np.float64)


class MeanDistance:
    """The trivial scorer: Euclidean distance to the training mean on training-standardised rows
    (the score an autoencoder that learned only the mean would give)."""

    def __init__(self, seed: int = 0):
        self.seed = seed

    def fit(self, x, y=None, log=None) -> "MeanDistance":
        x = check_rows(x).astype(np.float64)
        self.mean_, std = x.mean(0), x.std(0)
        self.std_ = np.where(std > 0, std, 1.0)
        return self

    def decision_function(self, x) -> np.ndarray:
        x = check_rows(x, len(self.mean_)).astype(np.float64)
        return np.linalg.norm((x - self.mean_) / self.std_, axis=1)


def make_detector(row: str, seed: int = 0, **mcm_kwargs):
    """The detector of a table row: an MCM row (MCM_ROWS, with `mcm_kwargs` for shared
    settings such as epochs or hidden_dim, overridden by the row's own keys) or a pyod name."""
    if row in MCM_ROWS:
        return MCMDetector(seed=seed, **{**mcm_kwargs, **MCM_ROWS[row]})
    if row in PYOD:
        return StandardizedBaseline(row, seed)
    if row == "mean_distance":
        return MeanDistance(seed)
    raise ValueError(f"unknown row '{row}'; choose from {', '.join(list(MCM_ROWS) + list(PYOD) + list(TRIVIAL))}.")
