"""Fisher-z CI tests with test-wise deletion of zeros (official `csl/utils/cit.py`, `ZeroDel_FisherZ`).

Theorem (the paper's Thm. 1/2): under the causal dropout model, X_i ⊥ X_j | X_S on the cells with
X_S ≠ 0 ⟺ Z_i ⊥ Z_j | Z_S. So the Fisher-z test run on those cells tests the dropout-free relation;
deleting the cells with a zero in i or j as well is also correct, with fewer cells (official README).

    r = −P[0, 1] / √(P[0, 0] P[1, 1]),   P = pinv(corr(X[rows][:, [i, j, S]]))
    z = √(N − |S| − 3) · |atanh r|,      p = 2(1 − Φ(z));   N ≤ |S| + 3 → p = 1

Both test classes are causal-learn `CIT_Base` objects, so `pc_cpdag` (and causal-learn's `pc`) take them
directly; `register_ci_test` (process-wide state) is not needed.
"""
from __future__ import annotations

from math import atanh, sqrt

import numpy as np
from causallearn.utils.cit import CIT_Base
from scipy.stats import norm

DELETE_MODES = ("conditioning", "all", "none")


def _check_data(data) -> np.ndarray:
    data = np.asarray(data, dtype=float)
    if data.ndim != 2:
        raise ValueError(f"data must be (cells, genes), got shape {data.shape}")
    if not np.all(np.isfinite(data)):
        raise ValueError("data holds NaN or infinite values; a Fisher-z test needs finite values")
    return data


def _fisher_z_of_corr(corr: np.ndarray, n: int, size: int) -> tuple[float, float]:
    """(p, r) from the correlation matrix over [i, j, S] of n cells (|S| = size)."""
    if n <= size + 3:
        return 1.0, 0.0
    if not np.all(np.isfinite(corr)):      # a gene constant on these cells: it carries no evidence
        return 1.0, 0.0
    precision = np.linalg.pinv(corr)
    r = -precision[0, 1] / sqrt(precision[0, 0] * precision[1, 1])
    if abs(r) >= 1:
        r = (1.0 - np.finfo(float).eps) * np.sign(r)
    statistic = sqrt(n - size - 3) * abs(atanh(r))
    return float(2 * norm.sf(statistic)), float(r)


def fisher_z(data, i: int, j: int, cond=(), rows=None) -> tuple[float, float, int]:
    """Fisher-z test of column i ⊥ column j | columns `cond` on `rows` (None: all cells).
    Returns (p, partial correlation r, cells used)."""
    data = _check_data(data)
    cond = [int(c) for c in cond]
    sub = data[:, [int(i), int(j), *cond]]
    if rows is not None:
        sub = sub[rows]
    n = len(sub)
    if n <= len(cond) + 3:
        return 1.0, 0.0, n
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.atleast_2d(np.corrcoef(sub.T))
    p, r = _fisher_z_of_corr(corr, n, len(cond))
    return p, r, n


class ZeroDeletionFisherZ(CIT_Base):
    """Fisher-z on the cells with no zero in the conditioning set (`delete="conditioning"`, the paper's
    test), in any of i, j, S (`"all"`, listwise), or on every cell (`"none"`: the plain Fisher-z test,
    used on Z, on X as measured and on imputed X)."""

    def __init__(self, data, delete: str = "conditioning", **kwargs):
        if delete not in DELETE_MODES:
            raise ValueError(f"unknown delete mode {delete!r}; choose from {', '.join(DELETE_MODES)}")
        data = _check_data(data)
        super().__init__(data, **kwargs)
        self.check_cache_method_consistent(f"zerodel_fisherz_{delete}", "NO SPECIFIED PARAMETERS")
        self.delete = delete
        self.nonzero = data != 0
        if delete == "none":            # every test sees all cells: one correlation matrix serves them all
            with np.errstate(invalid="ignore", divide="ignore"):
                self.correlation = np.atleast_2d(np.corrcoef(data.T))

    def _key(self, X, Y, condition_set):
        return self.get_formatted_XYZ_and_cachekey(X, Y, condition_set)

    def rows(self, X, Y, condition_set=()) -> np.ndarray:
        """Indices of the cells the test of X ⊥ Y | condition_set uses."""
        [x], [y], cond, _ = self._key(X, Y, condition_set)
        if self.delete == "none":
            return np.arange(self.sample_size)
        involved = cond if self.delete == "conditioning" else [x, y, *cond]
        if not involved:
            return np.arange(self.sample_size)
        return np.flatnonzero(self.nonzero[:, involved].all(axis=1))

    def test(self, X, Y, condition_set=None) -> tuple[float, float, int]:
        """(p, r, cells used), cached."""
        [x], [y], cond, key = self._key(X, Y, condition_set)
        if key not in self.pvalue_cache:
            if self.delete == "none":
                var = [x, y, *cond]
                p, r = _fisher_z_of_corr(self.correlation[np.ix_(var, var)], self.sample_size, len(cond))
                self.pvalue_cache[key] = (p, r, self.sample_size)
            else:
                self.pvalue_cache[key] = fisher_z(self.data, x, y, cond, rows=self.rows(x, y, cond))
        return self.pvalue_cache[key]

    def __call__(self, X, Y, condition_set=None) -> float:
        return self.test(X, Y, condition_set)[0]


MATCH_MODES = ("conditioning", "all")


class RandomDeletionFisherZ(CIT_Base):
    """The `random_del` controls: per test, as many cells as zero deletion keeps (`match="conditioning"`: no
    zero in S) or as listwise deletion keeps (`match="all"`: no zero in i, j or S; the power-matched
    control, see README), drawn uniformly from all cells (generator seeded by (seed, i, j, S)): a sample
    size of a deletion, without its mechanism."""

    def __init__(self, data, seed: int = 0, match: str = "conditioning", **kwargs):
        if match not in MATCH_MODES:
            raise ValueError(f"unknown match mode {match!r}; choose from {', '.join(MATCH_MODES)}")
        data = _check_data(data)
        super().__init__(data, **kwargs)
        self.check_cache_method_consistent("random_deletion_fisherz", f"seed={seed},match={match}")
        self.seed, self.match = int(seed), match
        self.nonzero = data != 0

    def rows(self, X, Y, condition_set=()) -> np.ndarray:
        [x], [y], cond, _ = self.get_formatted_XYZ_and_cachekey(X, Y, condition_set)
        involved = cond if self.match == "conditioning" else [x, y, *cond]
        count = int(self.nonzero[:, involved].all(axis=1).sum()) if involved else self.sample_size
        rng = np.random.default_rng([self.seed, x, y, *cond])
        return np.sort(rng.choice(self.sample_size, size=count, replace=False))

    def test(self, X, Y, condition_set=None) -> tuple[float, float, int]:
        [x], [y], cond, key = self.get_formatted_XYZ_and_cachekey(X, Y, condition_set)
        if key not in self.pvalue_cache:
            self.pvalue_cache[key] = fisher_z(self.data, x, y, cond, rows=self.rows(x, y, cond))
        return self.pvalue_cache[key]

    def __call__(self, X, Y, condition_set=None) -> float:
        return self.test(X, Y, condition_set)[0]
