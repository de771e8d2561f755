"""Holding a block's sparsity budget exactly: the final projection onto the target.

BESA's penalty λ((s − s*)/s*)² pulls the block's sparsity s towards the target s* but does not
hold it (at 60% the mini tier lands at 0.579). After training, each row r (of `cols_r` weights)
has a learned sparsity s_r; the projection is the weighted Euclidean projection onto the budget

    min Σ_r cols_r (s'_r − s_r)²   s.t.   Σ_r cols_r s'_r = s*·N,  0 ≤ s'_r ≤ 1     (N = Σ_r cols_r)

whose solution is s'_r = clamp(s_r + τ, 0, 1) with the one τ that meets the budget (found by
bisection: the sum is non-decreasing in τ). Rows then drop n_r = ⌊s'_r·cols_r⌋ weights and the
few weights the floors leave over go one each to the rows with the largest remainders, so the
block drops exactly round(s*·N) weights. The learned allocation (which rows are sparser than
others) is kept; only its level moves.
"""
from __future__ import annotations

import torch


def project_counts(row_sparsity: list[torch.Tensor], cols: list[int], target: float) -> list[torch.Tensor]:
    """Per layer, the number of weights each row drops so that the block drops exactly
    round(target · Σ_layers rows·cols) weights. `row_sparsity[i]` holds layer i's rows' s_r."""
    if not 0 <= target <= 1:
        raise ValueError(f"target sparsity must be in [0, 1], got {target}")
    if len(row_sparsity) != len(cols) or not row_sparsity:
        raise ValueError(f"need one row-sparsity vector per layer: got {len(row_sparsity)} vectors, {len(cols)} widths")
    s = torch.cat([r.detach().double().reshape(-1) for r in row_sparsity])
    c = torch.cat([torch.full((len(r.reshape(-1)),), float(n), dtype=torch.float64) for r, n in zip(row_sparsity, cols)])
    total = float(c.sum())
    budget = round(target * total)

    def dropped(tau: float) -> float:
        return float((c * (s + tau).clamp(0, 1)).sum())

    lo, hi = -1.0, 1.0                          # dropped(-1) = 0 <= budget <= total = dropped(1)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if dropped(mid) < budget else (lo, mid)
    exact = (s + hi).clamp(0, 1) * c
    counts = torch.floor(exact + 1e-9).clamp(max=c)
    left = budget - int(counts.sum())
    if left > 0:                                # the floors' remainders, largest first
        room = counts < c
        remainder = torch.where(room, exact - counts, torch.full_like(exact, -1.0))
        counts[remainder.argsort(descending=True, stable=True)[:left]] += 1
    elif left < 0:                              # float error only: take back from the smallest remainders
        remainder = torch.where(counts > 0, exact - counts, torch.full_like(exact, 2.0))
        counts[remainder.argsort(stable=True)[:-left]] -= 1
    out, i = [], 0
    for r in row_sparsity:
        n = len(r.reshape(-1))
        out.append(counts[i:i + n].long().reshape(r.shape))
        i += n
    return out


def random_row_sparsity(rows: int, target: float, spread: float, generator: torch.Generator) -> torch.Tensor:
    """The control's allocation: each row's sparsity drawn uniformly from target ± spread (clamped to
    [0, 1]); `project_counts` then brings the block back onto the budget."""
    if not 0 <= spread <= 1:
        raise ValueError(f"spread must be in [0, 1], got {spread}")
    u = torch.rand(rows, generator=generator, dtype=torch.float64)
    return (target + spread * (2 * u - 1)).clamp(0, 1)


def prune_rows_counts(weight: torch.Tensor, score: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Zero the `counts[r]` lowest-scoring weights of row r (a new tensor)."""
    if counts.shape != weight.shape[:1] or bool((counts < 0).any()) or bool((counts > weight.shape[1]).any()):
        raise ValueError(f"counts must be one integer in [0, {weight.shape[1]}] per row of a {tuple(weight.shape)} weight")
    rank = score.argsort(dim=1).argsort(dim=1)
    return weight * (rank >= counts.to(weight.device).unsqueeze(1)).to(weight.dtype)
