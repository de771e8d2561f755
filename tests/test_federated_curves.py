"""common.federated.curves: rounds_to_target on hand-made curves; subset_share against the
exact cases (every client sampled; a subset holding nothing / everything) and, over many rounds,
against its expectation under uniform sampling without replacement, enumerated by hand."""
import itertools
import math

import numpy as np
import pytest

from common.federated.curves import rounds_to_target, subset_share
from common.federated.sampling import sample_clients


def test_rounds_to_target():
    assert rounds_to_target([5, 10, 15, 20], [20.0, 39.9, 40.0, 55.0], 40.0) == 15.0
    assert rounds_to_target([5, 10], [50.0, 10.0], 40.0) == 5.0          # first crossing, not the last
    assert rounds_to_target([5, 10], [10.0, 39.0], 40.0) == math.inf
    assert rounds_to_target([], [], 40.0) == math.inf
    with pytest.raises(ValueError, match="one accuracy"):
        rounds_to_target([5, 10], [1.0], 40.0)
    with pytest.raises(ValueError, match="increasing"):
        rounds_to_target([10, 5], [1.0, 2.0], 40.0)
    with pytest.raises(ValueError, match="finite"):
        rounds_to_target([5], [1.0], float("nan"))


def test_subset_share_exact_cases():
    sizes = [10, 20, 30, 40]
    assert subset_share(sizes, [0, 3], 3, 4, seed=1) == [0.5, 0.5, 0.5]   # all sampled: 50 / 100
    assert subset_share(sizes, [], 2, 2, seed=1) == [0.0, 0.0]
    assert subset_share(sizes, [0, 1, 2, 3], 2, 2, seed=1) == [1.0, 1.0]
    r = 3   # one round written out: the sampled clients' sizes
    s = sample_clients(4, 2, r, 7)
    assert subset_share(sizes, [1], r + 1, 2, seed=7)[r] == pytest.approx((20 if 1 in s else 0) / sum(sizes[c] for c in s))


def test_subset_share_mean_matches_enumeration():
    sizes, subset, per = [3, 1, 4, 1, 5, 9], [0, 4], 3
    pairs = list(itertools.combinations(range(6), per))   # every sample equally likely
    expected = np.mean([sum(sizes[c] for c in p if c in subset) / sum(sizes[c] for c in p) for p in pairs])
    got = np.mean(subset_share(sizes, subset, 4000, per, seed=0))
    assert got == pytest.approx(expected, abs=0.01)


def test_subset_share_bad_input():
    with pytest.raises(ValueError, match="clients_per_round"):
        subset_share([1, 2], [0], 1, 3, seed=0)
    with pytest.raises(ValueError, match="outside"):
        subset_share([1, 2], [2], 1, 1, seed=0)
    with pytest.raises(ValueError, match=">= 0"):
        subset_share([1, -2], [0], 1, 1, seed=0)
