"""Kernel-InfoNCE (Tan, Zhang, Yang, Yuan, "Contrastive Learning Is Spectral Clustering on
Similarity Graph", ICLR 2024, arXiv:2303.15103), as pure functions of embeddings.

InfoNCE is spectral clustering on the similarity graph with the Gaussian kernel of the
embeddings; the paper's maximum-entropy argument admits every exponential kernel
exp(-|x - y|^gamma / tau), gamma in (0, 2], and sums of them. Everything here works on
log K with logsumexp, in the input dtype.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

KERNELS = ("gaussian", "laplacian", "exponential", "simple_sum", "concat_sum")
MIN_SQUARED_DISTANCE = 1e-12
OFFICIAL_EPS = 1e-6      # the official gamma_loss's eps: clamp(neg, min=eps) and pos / (neg + eps)


def _check_kernel(kernel: str, temperature: float, gamma: float, temperature2: float | None) -> None:
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel '{kernel}'; choose one of {', '.join(KERNELS)}")
    if not 0 < gamma <= 2:
        raise ValueError(f"gamma must lie in (0, 2] (an exponential kernel is positive definite only there), got {gamma}")
    for name, t in (("temperature", temperature), ("temperature2", temperature2)):
        if t is not None and not t > 0:
            raise ValueError(f"{name} must be > 0, got {t}")


def squared_distances(z_a: torch.Tensor, z_b: torch.Tensor) -> torch.Tensor:
    """|a - b|^2 (n_a, n_b) as clamp(|a|^2 + |b|^2 - 2 a.b, min=1e-12): |a - b| has no gradient
    at a = b, while the clamp keeps d^gamma and its gradient finite when two points coincide."""
    sq = z_a.pow(2).sum(-1)[:, None] + z_b.pow(2).sum(-1)[None, :] - 2.0 * z_a @ z_b.T
    return sq.clamp(min=MIN_SQUARED_DISTANCE)


def log_kernel(z_a: torch.Tensor, z_b: torch.Tensor, kernel: str, temperature: float, gamma: float = 1.0,
               temperature2: float | None = None) -> torch.Tensor:
    """log K(a, b) (n_a, n_b) between the rows of z_a (n_a, d) and z_b (n_b, d), as given (no
    normalisation). d = |a - b|, tau2 = tau unless set:

    gaussian     -d^2/tau                                  SimCLR's kernel
    laplacian    -d/tau                                    exponential with gamma = 1
    exponential  -d^gamma/tau                              the paper's exponential kernels
    simple_sum   log(e^{-d^gamma/tau} + e^{-d^2/tau2})     the paper's "Simple Sum"
    concat_sum   log(e^{-d_A^gamma/tau} + e^{-d_B^2/tau2})  the paper's "Concatenation Sum": A and B
                 the first and second half of the dimensions (d even)
    (equation numbers: README "Equations".)
    gamma is read by exponential, simple_sum and concat_sum.
    """
    _check_kernel(kernel, temperature, gamma, temperature2)
    if z_a.dim() != 2 or z_b.dim() != 2 or z_a.shape[1] != z_b.shape[1]:
        raise ValueError(f"z_a and z_b must be (n_a, d) and (n_b, d) with the same d, got {tuple(z_a.shape)} "
                         f"and {tuple(z_b.shape)}")
    t2 = temperature if temperature2 is None else temperature2
    if kernel == "concat_sum":
        dim = z_a.shape[-1]
        if dim % 2:
            raise ValueError(f"concat_sum splits the embedding into two halves; its dimension must be even, got {dim}")
        half = dim // 2
        first = -squared_distances(z_a[:, :half], z_b[:, :half]).pow(gamma / 2) / temperature
        second = -squared_distances(z_a[:, half:], z_b[:, half:]) / t2
        return torch.logaddexp(first, second)
    sq = squared_distances(z_a, z_b)
    if kernel == "gaussian":
        return -sq / temperature
    if kernel == "laplacian":
        return -sq.sqrt() / temperature
    exponential = -sq.pow(gamma / 2) / temperature
    if kernel == "exponential":
        return exponential
    return torch.logaddexp(exponential, -sq / t2)          # simple_sum


def _check_pair(z1: torch.Tensor, z2: torch.Tensor) -> None:
    if z1.dim() != 2 or z1.shape != z2.shape:
        raise ValueError(f"z1 and z2 must both be (N, d) with the same shape, got {tuple(z1.shape)} and {tuple(z2.shape)}")
    if z1.shape[0] < 2:
        raise ValueError(f"kernel_infonce needs N >= 2 pairs (negatives), got N = {z1.shape[0]}")


def kernel_infonce(z1: torch.Tensor, z2: torch.Tensor, kernel: str, temperature: float, gamma: float = 1.0,
                   temperature2: float | None = None, guarded: bool = False) -> torch.Tensor:
    """Kernel-InfoNCE loss (the paper's Kernel-InfoNCE; SimCLR's InfoNCE with K in place of exp(cos/tau)):

    L = 1/(2N) sum_a -log( K(u_a, u_a+) / S_a ),  S_a = sum_{b != a} K(u_a, u_b),  u = [z1; z2] (2N, d)

    with rows L2-normalised first and a+ the other view of a's image. The positive stays in
    the denominator, as in SimCLR and the official `gamma_loss`.

    guarded=True is the official `gamma_loss` as its code computes it (simclr_module.py):
    -log( K(u_a, u_a+) / (max(S_a, eps) + eps) ), eps = 1e-6, i.e. a constant eps added to every
    denominator. It differs from the plain loss only where S_a is not large against 1e-6 (small
    tau, gamma < 2: at tau 0.0625, gamma 1 and positives at cosine 0.7, K(u_a, u_a+) ~ 4e-6), and
    there it adds log(1 + eps / S_a) per anchor. Computed in log space (logsumexp), so it is
    finite where the official float32 exp underflows.
    """
    _check_pair(z1, z2)
    n = z1.shape[0]
    u = F.normalize(torch.cat([z1, z2]), dim=1)                                  # (2N, d)
    logits = log_kernel(u, u, kernel, temperature, gamma, temperature2)          # (2N, 2N)
    logits = logits.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=u.device), float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(u.device)
    if not guarded:
        return F.cross_entropy(logits, targets)
    log_eps = math.log(OFFICIAL_EPS)
    log_s = torch.logsumexp(logits, dim=1).clamp(min=log_eps)                    # log max(S_a, eps)   (2N,)
    log_den = torch.logaddexp(log_s, torch.full_like(log_s, log_eps))            # log(max(S_a, eps) + eps)
    log_pos = logits.gather(1, targets[:, None]).squeeze(1)                      # log K(u_a, u_a+)    (2N,)
    return (log_den - log_pos).mean()


def kernel_loss_sum(z1: torch.Tensor, z2: torch.Tensor, temperature: float, gamma: float = 1.0,
                    weight: float = 0.5, guarded: bool = False) -> torch.Tensor:
    """The official code's `loss_type=sum`: lambda * L_exponential(gamma) + (1 - lambda) * L_gaussian,
    a weighted sum of two losses with one tau (README, Deviations: the paper sums kernels inside one loss).
    guarded: each term guarded as in `kernel_infonce` (the official code guards both)."""
    if not 0 <= weight <= 1:
        raise ValueError(f"the loss-sum weight lambda must lie in [0, 1], got {weight}")
    return (weight * kernel_infonce(z1, z2, "exponential", temperature, gamma, guarded=guarded)
            + (1 - weight) * kernel_infonce(z1, z2, "gaussian", temperature, guarded=guarded))
