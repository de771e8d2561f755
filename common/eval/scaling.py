"""Scaling laws from measured curves, in numpy float64: a power-law fit y = prefactor * x**exponent
(least squares of log y on log x), its bootstrap interval, and the crossover of two curves.

Not exported from `common/eval/__init__.py` (importing it there would put this file into the code
fingerprint of every table that imports `common.eval`); import it by its full path:
`from common.eval.scaling import fit_power_law, bootstrap_power_law, crossover`.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["fit_power_law", "bootstrap_power_law", "crossover"]


def _positive(name: str, values) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {arr[~np.isfinite(arr)][:3].tolist()} among its values")
    if np.any(arr <= 0):
        raise ValueError(f"{name} must be > 0 (a power law is fitted in log-log), got {arr[arr <= 0][:3].tolist()}")
    return arr


def _checked(x, y) -> tuple[np.ndarray, np.ndarray]:
    """x (k,) > 0 with >= 2 distinct values; y (k,) or (k, R) > 0 and finite."""
    x = _positive("x", x)
    y = _positive("y", y)
    if x.ndim != 1:
        raise ValueError(f"x must be one-dimensional, got shape {x.shape}")
    if y.ndim not in (1, 2) or y.shape[0] != x.shape[0]:
        raise ValueError(f"y must have shape ({len(x)},) or ({len(x)}, R) to match x, got {y.shape}")
    if len(np.unique(x)) < 2:
        raise ValueError(f"a power law needs at least 2 distinct x, got {np.unique(x).tolist()}")
    return x, y


def _slopes(log_x: np.ndarray, log_y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares (slope, intercept) of log_y on log_x along the last axis (batched)."""
    mx, my = log_x.mean(axis=-1, keepdims=True), log_y.mean(axis=-1, keepdims=True)
    dx = log_x - mx
    slope = (dx * (log_y - my)).sum(axis=-1) / (dx * dx).sum(axis=-1)
    return slope, my[..., 0] - slope * mx[..., 0]


def fit_power_law(x, y) -> tuple[float, float]:
    """(exponent, prefactor) of y ≈ prefactor · x^exponent by least squares of log y on log x."""
    x, y = _checked(x, y)
    if y.ndim != 1:
        raise ValueError(f"fit_power_law takes y of shape ({len(x)},); average replicates first "
                         f"(or use bootstrap_power_law), got {y.shape}")
    slope, intercept = _slopes(np.log(x), np.log(y))
    return float(slope), float(math.exp(intercept))


def bootstrap_power_law(x, y, n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> dict[str, float]:
    """The power-law fit on all data with a percentile bootstrap interval [low, high] of its exponent.

    y (k, R): R replicate measurements at each x; a bootstrap sample resamples the R replicates at
    each x independently and fits their means (the point estimate fits the means of all of them).
    y (k,): one measurement per x; a bootstrap sample resamples the k points with replacement
    (needs >= 3 distinct x; samples with fewer than 2 distinct x have no fit and are dropped).
    Returns {exponent, prefactor, low, high}."""
    x, y = _checked(x, y)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if int(n_boot) != n_boot or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot}")
    rng = np.random.default_rng(seed)
    log_x = np.log(x)
    if y.ndim == 2:
        k, reps = y.shape
        exponent, prefactor = fit_power_law(x, y.mean(axis=1))
        picks = rng.integers(0, reps, size=(int(n_boot), k, reps))
        means = np.take_along_axis(np.broadcast_to(y, (int(n_boot), k, reps)), picks, axis=2).mean(axis=2)
        slopes, _ = _slopes(np.broadcast_to(log_x, means.shape), np.log(means))
    else:
        if len(np.unique(x)) < 3:
            raise ValueError(f"resampling points needs at least 3 distinct x, got {np.unique(x).tolist()}")
        exponent, prefactor = fit_power_law(x, y)
        picks = rng.integers(0, len(x), size=(int(n_boot), len(x)))
        bx, by = log_x[picks], np.log(y)[picks]
        ok = np.ptp(bx, axis=1) > 0
        slopes, _ = _slopes(bx[ok], by[ok])
    tail = (1.0 - level) / 2
    low, high = np.quantile(slopes, [tail, 1.0 - tail])
    return {"exponent": exponent, "prefactor": prefactor, "low": float(low), "high": float(high)}


def crossover(x, y_a, y_b) -> float:
    """The first x at which curve a reaches curve b (y_a <= y_b), x increasing: linear in
    (log x, log y_a - log y_b) between the last point with y_a > y_b and the first with y_a <= y_b.
    nan when not bracketed (a is never above b before reaching it, or never reaches it)."""
    x = _positive("x", x)
    y_a, y_b = _positive("y_a", y_a), _positive("y_b", y_b)
    if x.ndim != 1 or y_a.shape != x.shape or y_b.shape != x.shape:
        raise ValueError(f"x, y_a and y_b must be one-dimensional of one length, got {x.shape}, {y_a.shape}, {y_b.shape}")
    if len(x) < 2:
        raise ValueError(f"a crossover needs at least 2 distinct x, got {x.tolist()}")
    if np.any(np.diff(x) <= 0):
        raise ValueError(f"x must be strictly increasing, got {x.tolist()}")
    gap = np.log(y_a) - np.log(y_b)
    reached = np.flatnonzero(gap <= 0)
    if len(reached) == 0 or reached[0] == 0:
        return float("nan")
    j = int(reached[0])
    t = gap[j - 1] / (gap[j - 1] - gap[j])
    return float(math.exp(math.log(x[j - 1]) + t * (math.log(x[j]) - math.log(x[j - 1]))))
