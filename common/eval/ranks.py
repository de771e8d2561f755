"""The rank summary that papers comparing many detectors over many datasets report (Demšar, JMLR
2006): each method's average rank over datasets, and a Wilcoxon signed-rank test over datasets
between two methods. Not exported from common/eval/__init__.py (its fingerprint is shared by every
table); import it by its full path."""
from __future__ import annotations

from typing import Literal

import numpy as np
from scipy.stats import rankdata, wilcoxon


def average_ranks(scores: dict[str, list[float]], higher_is_better: bool = True) -> dict[str, float]:
    """{method: [score on dataset 1, ..., dataset n]} -> {method: mean rank over the n datasets}.
    On each dataset the best method has rank 1; ties share the mean of their ranks (so the ranks
    of m methods always sum to m(m+1)/2 per dataset)."""
    if not scores:
        raise ValueError("average_ranks needs at least one method.")
    names = list(scores)
    table = np.asarray([scores[n] for n in names], dtype=np.float64)          # (methods, datasets)
    if table.ndim != 2 or table.shape[1] == 0:
        raise ValueError(f"every method needs the same non-zero number of scores, got shape {table.shape}.")
    if not np.isfinite(table).all():
        raise ValueError("scores must be finite.")
    ranks = rankdata(-table if higher_is_better else table, axis=0)          # rank within each dataset
    return {n: float(r) for n, r in zip(names, ranks.mean(axis=1))}


def wilcoxon_p(a: list[float], b: list[float],
               alternative: Literal["greater", "less", "two-sided"] = "greater") -> float:
    """p-value of the Wilcoxon signed-rank test on the paired differences a_i - b_i over datasets
    (scipy.stats.wilcoxon; zero differences dropped, exact distribution for small n). 'greater':
    H1 is that a tends to exceed b. When every difference is zero there is no evidence: p = 1."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"a and b must be 1-D of the same non-zero length, got {a.shape} and {b.shape}.")
    if not (a - b).any():
        return 1.0
    return float(wilcoxon(a, b, alternative=alternative).pvalue)


__all__ = ["average_ranks", "wilcoxon_p"]
