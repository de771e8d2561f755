"""Pruning and importance metrics of a trained autoencoder (the paper's experiments; official
src/model/utils/metrics.py and notebook/result_examination.ipynb).

`encode`/`decode` are callables (a model's methods, or PCA's projections). All statistics of z
(σ, means) come from x itself, as in the official notebooks. Pruning a latent dimension sets
it to its mean over x.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def l2_loss(x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Mean over samples of ‖x̂_n − x_n‖₂ (official `l2_loss`, the paper's reported metric)."""
    return (x_hat - x).flatten(1).norm(dim=1).mean()


def _decode_copies(decode, x: torch.Tensor, count: int, block: Callable[[int, int], torch.Tensor], loss_fn: Loss,
                   chunk: int | None) -> torch.Tensor:
    """loss_fn(decode(copy_c), x) for c = 0..count-1, the copies built `chunk` at a time by
    block(start, stop) -> (b, n, m) and decoded as one batch of b·n rows (None: all `count` at
    once; the paper tier's 2048 dims need chunks, the copies alone would be (m, n, m)). Returns (count,)."""
    step = count if chunk is None else chunk
    if step < 1:
        raise ValueError(f"chunk must be a positive number of copies, got {chunk}.")
    losses = []
    for start in range(0, count, step):
        copies = block(start, min(start + step, count))          # (b, n, m)
        b, n, m = copies.shape
        x_hat = decode(copies.reshape(-1, m))                    # (b·n, ...)
        x_hat = x_hat.reshape(b, n, *x_hat.shape[1:])            # (b, n, ...)
        losses += [loss_fn(x_hat[j], x) for j in range(b)]
    return torch.stack(losses)


def _prune_orders(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(σ (m,), dims sorted by descending σ (m,), means (m,)) of z (n, m)."""
    std = z.std(0)
    return std, std.argsort(descending=True), z.mean(0)


def pruned_latents(z: torch.Tensor, keep: int) -> torch.Tensor:
    """z with all but the `keep` dimensions of largest σ set to their means (n, m)."""
    m = z.shape[1]
    if not 0 <= keep <= m:
        raise ValueError(f"keep must lie in [0, {m}], got {keep}.")
    _, order, mean = _prune_orders(z)
    out = z.clone()
    drop = order[keep:]
    out[:, drop] = mean[drop]
    return out


@torch.no_grad()
def pruned_loss(encode, decode, x: torch.Tensor, keep: int, loss_fn: Loss = l2_loss) -> float:
    """L(top-k): the loss after keeping only the k latent dimensions of largest σ."""
    return float(loss_fn(decode(pruned_latents(encode(x), keep)), x))


@torch.no_grad()
def pruning_curve(encode, decode, x: torch.Tensor, loss_fn: Loss = l2_loss, chunk: int | None = None) -> torch.Tensor:
    """L(top-k) for k = 0..m (m + 1,): k = 0 is L_all (all of z at its mean), k = m is L_0; the
    m + 1 pruned copies decoded `chunk` at a time (None: in one batch)."""
    z = encode(x)
    n, m = z.shape
    _, order, mean = _prune_orders(z)

    def block(start: int, stop: int) -> torch.Tensor:
        copies = z.expand(stop - start, n, m).clone()            # (b, n, m), copy k keeps the top k
        for j, k in enumerate(range(start, min(stop, m))):
            drop = order[k:]
            copies[j][:, drop] = mean[drop]
        return copies
    return _decode_copies(decode, x, m + 1, block, loss_fn, chunk)


@torch.no_grad()
def explained_reconstruction(encode, decode, x: torch.Tensor, loss_fn: Loss = l2_loss,
                             chunk: int | None = None) -> torch.Tensor:
    """ρ_i = (L_i − L_0)₊ / (L_all − L_0) for every latent dimension i (m,), L_i with z_i alone
    at its mean (official `explained_reconstruction`). The m pruned copies are decoded in
    batches of `chunk` copies (None: all at once) instead of the official per-dimension loop."""
    z = encode(x)
    n, m = z.shape
    mean = z.mean(0)
    base = loss_fn(decode(z), x)
    total = loss_fn(decode(mean.expand(n, m)), x)

    def block(start: int, stop: int) -> torch.Tensor:
        copies = z.expand(stop - start, n, m).clone()            # (b, n, m), copy i drops dim start + i
        idx = torch.arange(stop - start, device=z.device)
        copies[idx, :, idx + start] = mean[start:stop].unsqueeze(1).expand(stop - start, n)
        return copies
    losses = _decode_copies(decode, x, m, block, loss_fn, chunk)
    return (losses - base).clamp_min(0) / (total - base)


def latent_dim_from_curve(curve: torch.Tensor, rel_tol: float = 0.05) -> int:
    """Smallest k with L(top-k) − L_0 ≤ rel_tol · (L_all − L_0), curve = pruning_curve (m + 1,).

    With rel_tol = 0.01 and a non-increasing curve this equals the official count
    (notebook/plot_results.ipynb `dr_rank`: the number of pruned-tail sizes whose explained
    reconstruction is ≥ δ), up to ties at exactly δ."""
    if not 0 <= rel_tol < 1:
        raise ValueError(f"rel_tol must lie in [0, 1), got {rel_tol}.")
    base, total = curve[-1], curve[0]
    ok = (curve - base) <= rel_tol * (total - base)
    return int(torch.nonzero(ok)[0])


@torch.no_grad()
def latent_dim(encode, decode, x: torch.Tensor, rel_tol: float = 0.05, loss_fn: Loss = l2_loss) -> int:
    """latent_dim@δ: the fewest top-σ dimensions that keep the loss within δ of L_0, in units
    of L_all − L_0."""
    return latent_dim_from_curve(pruning_curve(encode, decode, x, loss_fn), rel_tol)


@torch.no_grad()
def importance_correlation(encode, decode, x: torch.Tensor, loss_fn: Loss = l2_loss, top: int | None = None) -> float:
    """Pearson corr(σ_i, ρ_i) over the latent dimensions (official `importance_correlation`);
    `top` restricts it to the `top` dimensions of largest σ (the paper's figures use
    latent_dim + 1 with δ = 0.01)."""
    std = encode(x).std(0)
    rho = explained_reconstruction(encode, decode, x, loss_fn)
    if top is not None:
        order = std.argsort(descending=True)[:top]
        std, rho = std[order], rho[order]
    return pearson(std, rho)


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(np.corrcoef(a.double().cpu().numpy(), b.double().cpu().numpy())[0, 1])


def knn_accuracy(z_train: torch.Tensor, y_train: torch.Tensor, z_test: torch.Tensor, y_test: torch.Tensor,
                 neighbours: int = 5) -> float:
    """Accuracy of a k-NN classifier on the latent codes (the official 5-NN notebook)."""
    from sklearn.neighbors import KNeighborsClassifier

    clf = KNeighborsClassifier(n_neighbors=neighbours).fit(z_train.cpu().numpy(), y_train.cpu().numpy())
    return float((clf.predict(z_test.cpu().numpy()) == y_test.cpu().numpy()).mean())
