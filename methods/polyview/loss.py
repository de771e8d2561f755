"""Poly-view contrastive losses (Shidani, Hjelm, Ramapuram, Webb, Dhekane, Busbridge,
"Poly-View Contrastive Learning", ICLR 2024, arXiv:2403.05490), as pure functions of z.

z is (N, M, d): N samples x M views x d dims (projector outputs, any scale: rows are
L2-normalised here). Every loss is one (NM) x (NM) logit matrix plus reductions over it,
with no Python loop over view pairs (alpha, beta); it is computed in z's dtype.

Notation (the issue's spec; README "Equations"): s(ia, jb) = z_ia . z_jb / tau and the pair
log-likelihood, for b != a,
    l_iab = s(ia, ib) - log( e^{s(ia, ib)} + sum_{j != i} sum_g e^{s(ia, jg)} ):
the positive is view b of the same sample, the negatives are every view of every other
sample, and the other positives of i are masked out (the appendix pseudo-code's mask).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import einsum, rearrange

LOSSES = ("geometric", "arithmetic", "sufficient_statistics", "multi_crop")


def _check(z: torch.Tensor, temperature: float) -> None:
    if z.dim() != 3:
        raise ValueError(f"z must be (N, M, d) = samples x views x dims, got shape {tuple(z.shape)}; "
                         f"reshape a flat (N*M, d) batch with rearrange(z, '(n m) d -> n m d', m=M)")
    if z.shape[1] < 2:
        raise ValueError(f"poly-view losses need M >= 2 views per sample, got M = {z.shape[1]}")
    if z.shape[0] < 2:
        raise ValueError(f"poly-view losses need N >= 2 samples (negatives), got N = {z.shape[0]}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def pair_scores(z: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(pos, neg): pos[i, a, b] = s(ia, ib) and neg[i, a, b] = log sum_{j != i} e^{s(ia, jb)},
    both (N, M, M): the positive logits and the log-mass of view b of the other samples."""
    n, m, _ = z.shape
    z = F.normalize(z, dim=-1)
    flat = rearrange(z, "n m d -> (n m) d")
    logits = rearrange(flat @ flat.T / temperature, "(i a) (j b) -> i a j b", i=n, j=n)  # (N, M, N, M)
    same_sample = torch.eye(n, dtype=torch.bool, device=z.device)[:, None, :, None]      # (N, 1, N, 1)
    neg = torch.logsumexp(logits.masked_fill(same_sample, float("-inf")), dim=2)         # (N, M, M)
    pos = einsum(z, z, "i a d, i b d -> i a b") / temperature                            # (N, M, M)
    return pos, neg


def pair_log_likelihoods(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """l_iab (N, M, M) as in the module docstring; the diagonal b = a is not a pair (unused)."""
    _check(z, temperature)
    pos, neg = pair_scores(z, temperature)
    all_negatives = torch.logsumexp(neg, dim=2, keepdim=True)    # (N, M, 1): every view of j != i
    return pos - torch.logaddexp(pos, all_negatives)


def _off_diagonal(m: int, device) -> torch.Tensor:
    return ~torch.eye(m, dtype=torch.bool, device=device)


def geometric_pvc(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """Geometric PVC (the geometric mean of the pairwise critics):
    L_G = -1/(N M (M-1)) sum_{i, a} sum_{b != a} l_iab."""
    ell = pair_log_likelihoods(z, temperature)
    return -ell[:, _off_diagonal(z.shape[1], z.device)].mean()


def arithmetic_pvc(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """Arithmetic PVC (the arithmetic mean of the pairwise critics):
    L_A = -1/(N M) sum_{i, a} log( 1/(M-1) sum_{b != a} e^{l_iab} ).

    -log of the mean pair likelihood, so L_A <= L_G (Jensen). The pseudo-code copies we found
    use logsumexp_b(CE_ab) - log N instead (README, Deviations)."""
    ell = pair_log_likelihoods(z, temperature)
    m = ell.shape[1]
    ell = ell.masked_fill(~_off_diagonal(m, z.device), float("-inf"))
    return -(torch.logsumexp(ell, dim=2) - math.log(m - 1)).mean()


def sufficient_statistics(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """Sufficient-statistics contrastive loss: view a of sample i is matched to the statistic
    of the rest of the same sample, t_ja = 1/(M-1) sum_{b != a} z_jb (unit z, mean not
    re-normalised), among the statistics t_ja of the N samples:
    L_SS = -1/(N M) sum_{i, a} log softmax_j(z_ia . t_ja / tau)_i."""
    _check(z, temperature)
    n, m, _ = z.shape
    z = F.normalize(z, dim=-1)
    rest = (z.sum(dim=1, keepdim=True) - z) / (m - 1)                         # (N, M, d): t_ja
    logits = einsum(z, rest, "i a d, j a d -> a i j") / temperature            # (M, N, N)
    targets = torch.arange(n, device=z.device).repeat(m)                      # (M*N,)
    return F.cross_entropy(rearrange(logits, "a i j -> (a i) j"), targets)


def multi_crop(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """Multi-crop baseline: the mean over the M(M-1)/2 view pairs a < b of the two-view
    NT-Xent `common.ssl.info_nce(z[:, a], z[:, b], tau)`, written with one logit matrix.

    For anchor (i, a) in pair (a, b) the denominator holds the positive s(ia, ib) and the
    2(N-1) negatives of views a and b of the other samples (not the M(N-1) of every view that
    the PVC losses use: the issue's spec, and the pairwise baseline `NTXent(pwe=True)` of
    Multi-View-CL; README, Deviations); the mean over unordered pairs of the symmetric NT-Xent
    is the mean over ordered pairs (a, b), a != b, of the anchor terms."""
    _check(z, temperature)
    m = z.shape[1]
    pos, neg = pair_scores(z, temperature)
    same_view = torch.diagonal(neg, dim1=1, dim2=2)[:, :, None]               # (N, M, 1): view a
    log_denominator = torch.logsumexp(torch.stack([pos, neg, same_view.expand_as(neg)]), dim=0)
    return -(pos - log_denominator)[:, _off_diagonal(m, z.device)].mean()


_BY_KIND = {"geometric": geometric_pvc, "arithmetic": arithmetic_pvc,
            "sufficient_statistics": sufficient_statistics, "multi_crop": multi_crop}


def poly_view_loss(z: torch.Tensor, temperature: float, kind: str) -> torch.Tensor:
    """The loss named `kind` (one of LOSSES) of z (N, M, d)."""
    if kind not in _BY_KIND:
        raise ValueError(f"unknown poly-view loss '{kind}'; choose one of {', '.join(LOSSES)}")
    return _BY_KIND[kind](z, temperature)

