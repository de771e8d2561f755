"""Read-outs of a FedAvg run's schedule and curve, pure functions:
`rounds_to_target`, the communication rounds a run needs to reach a target accuracy (the
"rounds to target" of federated papers, e.g. Twin-sight's Table 3), and `subset_share`, the share
of each round's sampled data held by a subset of clients (with FedAvg weights n_k, the factor by
which the subset's local updates reach the global model; e.g. the labeled clients of a
partial-client run, whose classifier the unlabeled clients return unchanged)."""
from __future__ import annotations

import math
from typing import Sequence

from common.federated.sampling import sample_clients


def rounds_to_target(rounds: Sequence[int], accs: Sequence[float], target: float) -> float:
    """The first evaluated round r_i (`rounds` strictly increasing, 1-based) with accs[i] >= target;
    math.inf when no evaluation reaches it (the curve is read only where it was evaluated, so the
    answer is an upper bound on the true round, exact when every round is evaluated)."""
    if len(rounds) != len(accs):
        raise ValueError(f"one accuracy per evaluated round, got {len(rounds)} rounds and {len(accs)} accuracies")
    if any(b <= a for a, b in zip(rounds, rounds[1:])) or (len(rounds) and rounds[0] < 1):
        raise ValueError(f"rounds must be strictly increasing and >= 1, got {list(rounds)}")
    if not math.isfinite(float(target)):
        raise ValueError(f"target must be finite, got {target!r}")
    for r, a in zip(rounds, accs):
        if float(a) >= float(target):
            return float(r)
    return math.inf


def subset_share(client_sizes: Sequence[int], subset: Sequence[int], rounds: int, clients_per_round: int,
                 seed: int) -> list[float]:
    """Per round r < `rounds`: sum of n_k over the sampled clients in `subset` / sum of n_k over
    all sampled clients, with the clients `sample_clients(K, clients_per_round, r, seed)` draws
    (what `federated_fit` samples). Its sum over rounds is the number of rounds' worth of the
    subset's full-weight updates the global model received."""
    k = len(client_sizes)
    if not 1 <= clients_per_round <= k:
        raise ValueError(f"clients_per_round={clients_per_round} must be in [1, {k}]")
    if any(not 0 <= c < k for c in subset):
        raise ValueError(f"subset {list(subset)} names clients outside 0..{k - 1}")
    if rounds < 0 or min(client_sizes, default=0) < 0:
        raise ValueError(f"rounds and client sizes must be >= 0, got {rounds} and {list(client_sizes)}")
    chosen, out = set(subset), []
    for r in range(rounds):
        sampled = sample_clients(k, clients_per_round, r, seed)
        total = sum(client_sizes[c] for c in sampled)
        out.append(sum(client_sizes[c] for c in sampled if c in chosen) / total if total else 0.0)
    return out
