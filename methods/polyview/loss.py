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

import functools
import math

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
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


@functools.lru_cache(maxsize=16)
@functools.lru_cache(maxsize=16)
def _other_samples_bias(n: int, m: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """(NM, NM) additive mask of the anchor x candidate logits, anchors (i, a) sample-major and
    candidates (g, j) view-major: 0 where the candidate is a view of another sample, -inf on the
    anchor's own M views (itself and its positives)."""
    own = torch.eye(n, dtype=torch.bool, device=device)[:, None, None, :]                 # (N, 1, 1, N): i == j
    bias = torch.zeros(n, m, m, n, dtype=dtype, device=device).masked_fill_(own.expand(n, m, m, n), float("-inf"))
    return bias.reshape(n * m, n * m)


def _unshifted_exp_is_safe(temperature: float, rows: int, dtype: torch.dtype) -> bool:
    """With unit rows every logit lies in [-1/tau, 1/tau]: e^logit and a row sum of `rows` of them
    stay normal floats of `dtype` (no overflow, no underflow) for moderate tau, so no max-shift pass
    is needed; otherwise the row max is subtracted first."""
    info = torch.finfo(dtype)
    return (1.0 / temperature + math.log(rows) < math.log(info.max) - 2.0
            and -1.0 / temperature > math.log(info.tiny) + 2.0)


class _LogMassOfOthers(torch.autograd.Function):
    """lse_r = log sum_{c not of r's sample} e^{x_r . x_c / tau}, r, c over the NM rows (i, a) of x
    (unit rows, sample-major). Forward: one GEMM, the M x M own-sample blocks set to -inf in place
    (N M^2 writes, no mask pass), one exp pass, one row sum (no max pass while e^logit cannot
    overflow or underflow). Backward without an (NM)^2 elementwise pass: with E the saved
    exponentials and D = diag(upstream / row sum), the softmax-weighted gradient W = D E gives
    d lse / d x = (D (E x) + E^T (D x)) / tau: two GEMMs on E and two row scalings of (NM) x d."""

    @staticmethod
    def forward(ctx, x, n, m, temperature):
        e = torch.mm(x * (1.0 / temperature), x.T)                                     # (NM, NM) logits
        e.view(n, m, n, m).diagonal(dim1=0, dim2=2).fill_(float("-inf"))               # own views of i
        if _unshifted_exp_is_safe(temperature, e.shape[1], e.dtype):
            shift = None
        else:
            shift = e.amax(dim=1, keepdim=True)         # every row has (N-1) M > 0 finite entries
            e.sub_(shift)
        total = e.exp_().sum(dim=1)
        ctx.save_for_backward(x, e, total)
        ctx.temperature = temperature
        return total.log() if shift is None else total.log() + shift.squeeze(1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, e, total = ctx.saved_tensors
        scale = (grad / total)[:, None]                                                # D as a column
        gx = torch.mm(e, x).mul_(scale)                                                # D (E x)
        gx.add_(torch.mm(e.T, x * scale))                                              # E^T (D x)
        return gx.div_(ctx.temperature), None, None, None


def negative_log_masses(z: torch.Tensor, temperature: float, per_view: bool = False) -> torch.Tensor:
    """log sum_{j != i} sum_g e^{s(ia, jg)}, (N, M): the log-mass of every view of the other samples
    for each anchor (i, a), from ONE (NM) x (NM) logit matrix with the anchor's own views masked
    and one log-sum-exp per anchor row (`_LogMassOfOthers`). With `per_view`, the mass of view g
    alone, log sum_{j != i} e^{s(ia, jg)}, (N, M, M) indexed [i, a, g] (the same matrix with
    columns view-major, each view's N candidates contiguous, a GEMM whose epilogue adds the -inf
    mask; plain autograd: multi-crop only).
    z is unit-normalised (N, M, d)."""
    n, m, _ = z.shape
    anchors = rearrange(z, "n m d -> (n m) d")
    if not per_view:
        return _LogMassOfOthers.apply(anchors, n, m, temperature).view(n, m)            # (N, M)
    bias = _other_samples_bias(n, m, z.device, z.dtype)
    candidates = rearrange(z, "n m d -> (m n) d")
    logits = torch.addmm(bias, anchors, candidates.T, alpha=1.0 / temperature)          # (NM, M N), masked
    return torch.logsumexp(logits.view(n, m, m, n), dim=-1)                              # (N, M, M)


def positive_logits(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """s(ia, ib), (N, M, M): the logits of each sample's own views (z unit-normalised)."""
    return torch.bmm(z, z.transpose(1, 2)) / temperature


def pair_log_likelihoods(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """l_iab (N, M, M) as in the module docstring; the diagonal b = a is not a pair (unused)."""
    _check(z, temperature)
    z = F.normalize(z, dim=-1)
    pos = positive_logits(z, temperature)
    neg = negative_log_masses(z, temperature)[:, :, None]                                 # (N, M, 1)
    return pos - torch.logaddexp(pos, neg)


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

    -log of the arithmetic mean of the pair likelihoods e^{l_iab}, so L_A <= L_G (Jensen) and
    L_A = L_G = NT-Xent at M = 2: the objective the arithmetic-mean critic names. The appendix
    pseudo-code as transcribed in the two public copies we found prints, per sample,
    logsumexp_b(CE_iab) - log N with CE = -l: that is -log of the HARMONIC mean of the pair
    likelihoods plus log((M-1)/N), not this; both are written out in tests/test_polyview.py
    (README, Deviations: the decision)."""
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
    z = F.normalize(z, dim=-1)
    pos = positive_logits(z, temperature)                                      # (N, M, M): [i, a, b]
    neg = negative_log_masses(z, temperature, per_view=True)                   # (N, M, M): [i, a, view]
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

