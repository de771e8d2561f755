"""VCAS's sampled weight gradient of a linear layer (SampleW), in plain PyTorch: the spec.

For Z = X Wᵀ with output gradient G (N token rows), the exact ∇W = Gᵀ X sums N rank-one
terms. SampleW keeps row i with probability q_i and rescales it by 1/q_i, an unbiased
estimate from the kept rows only:

    ∇W ≈ Σ_{i ∈ rows} G_iᵀ X_i / q_i                        (out, in)
"""
from __future__ import annotations


def sampled_weight_grad(grad_output, input, rows, keep_prob):
    """grad_output (N, out), input (N, in), rows (K,) kept row ids, keep_prob (N,) -> (out, in)."""
    kept = grad_output[rows] / keep_prob[rows].to(grad_output.dtype).unsqueeze(1)    # (K, out) gathered copy
    return kept.t() @ input[rows]                                                    # (K, in) gathered copy
