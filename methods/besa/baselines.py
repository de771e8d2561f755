"""One-shot pruning of a single linear layer: magnitude, Wanda and SparseGPT.

Every function takes the weight W (out × in) and the calibration statistics of the layer's
input X (tokens × in), and returns the pruned weight (a new tensor) at `sparsity`.
"""
from __future__ import annotations

import torch


def prune_rows(weight: torch.Tensor, score: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Zero the ⌊sparsity·in⌋ lowest-scoring weights of every output row."""
    k = int(weight.shape[1] * sparsity)
    if k == 0:
        return weight.clone()
    drop = score.argsort(dim=1)[:, :k]
    return weight.clone().scatter_(1, drop, 0.0)


def magnitude(weight: torch.Tensor, sparsity: float, **_) -> torch.Tensor:
    return prune_rows(weight, weight.abs(), sparsity)


def wanda_score(weight: torch.Tensor, x_norm: torch.Tensor) -> torch.Tensor:
    """|W_ij| · ‖X_j‖₂ (X_j: input feature j over all calibration tokens)."""
    return weight.abs() * x_norm.unsqueeze(0)


def wanda(weight: torch.Tensor, sparsity: float, x_norm: torch.Tensor, **_) -> torch.Tensor:
    return prune_rows(weight, wanda_score(weight, x_norm), sparsity)


def sparsegpt(weight: torch.Tensor, sparsity: float, hessian: torch.Tensor, blocksize: int = 128,
              percdamp: float = 0.01, **_) -> torch.Tensor:
    """SparseGPT (Frantar & Alistarh 2023) with H = 2XXᵀ/n from the caller.

    The upper Cholesky factor U of H⁻¹ turns optimal-brain-surgeon updates into a sweep over
    columns: pruning column i's weights w (to q = 0 where masked) and spreading the error
    (w − q)/U_ii over the later columns with U[i, i:]. The mask is chosen per block of
    `blocksize` columns with one threshold on w²/U_jj².
    """
    W = weight.clone().float()
    H = hessian.clone().float()
    cols = W.shape[1]
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    H += percdamp * torch.diag(H).mean() * torch.eye(cols, dtype=H.dtype, device=H.device)
    U = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    for i1 in range(0, cols, blocksize):
        i2 = min(i1 + blocksize, cols)
        W1, U1 = W[:, i1:i2].clone(), U[i1:i2, i1:i2]
        Q1, Err1 = torch.zeros_like(W1), torch.zeros_like(W1)
        score = W1.pow(2) / torch.diag(U1).pow(2).unsqueeze(0)
        k = int(score.numel() * sparsity)
        mask = torch.zeros_like(W1, dtype=torch.bool)
        if k:
            mask.view(-1)[score.flatten().argsort()[:k]] = True
        for i in range(i2 - i1):
            w, d = W1[:, i], U1[i, i]
            q = torch.where(mask[:, i], torch.zeros_like(w), w)
            Q1[:, i] = q
            err = (w - q) / d
            W1[:, i:] -= err.unsqueeze(1) * U1[i, i:].unsqueeze(0)   # lazy within the block
            Err1[:, i] = err
        W[:, i1:i2] = Q1
        W[:, i2:] -= Err1 @ U[i1:i2, i2:]                            # then the rest at once
    return W.to(weight.dtype)


ONE_SHOT = {"magnitude": magnitude, "wanda": wanda, "sparsegpt": sparsegpt}
