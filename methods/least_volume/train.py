"""The stages of a run as plain functions: train an autoencoder with a latent penalty, build the
PCA baseline, evaluate. (A ~40-line loop of its own, like the official `_AutoEncoder.fit`:
epochs of shuffled mini-batches, loss = J + λ·P; the shared Trainer adds nothing needed here.)"""
from __future__ import annotations

from typing import Callable

import torch

from methods.least_volume.loss import PENALTIES, RECONSTRUCTIONS, least_volume_loss, volume_penalty
from methods.least_volume.metrics import (explained_reconstruction, knn_accuracy, l2_loss, latent_dim_from_curve,
                                          pearson, pruning_curve)


def penalty_fn(name: str, eta: float = 1.0) -> Callable[[torch.Tensor], torch.Tensor]:
    """'volume' (with offset η), 'l1', 'lasso', 'student_t', or 'none'."""
    if name == "volume":
        return lambda z: volume_penalty(z, eta)
    if name == "none":
        return lambda z: z.new_zeros(())
    if name not in PENALTIES:
        raise ValueError(f"penalty must be one of volume, l1, lasso, student_t, none; got {name!r}.")
    return PENALTIES[name]


def fit_autoencoder(model: torch.nn.Module, x: torch.Tensor, penalty: str = "volume", weight: float = 1e-2,
                    eta: float = 1.0, reconstruction: str = "bce", steps: int = 3000, batch_size: int = 128,
                    lr: float = 1e-3, betas=(0.9, 0.99), seed: int = 0,
                    log: Callable[[dict], None] | None = None, log_every: int = 500) -> list[dict]:
    """Adam on J(x, g(e(x))) + λ·P(e(x)) for `steps` mini-batches (epochs of a seeded shuffle of
    x (N, ...)); returns the logged rows and leaves the model in eval mode."""
    if reconstruction not in RECONSTRUCTIONS:
        raise ValueError(f"reconstruction must be 'bce' or 'mse', got {reconstruction!r}.")
    pen, rec = penalty_fn(penalty, eta), RECONSTRUCTIONS[reconstruction]
    if batch_size < 2 or batch_size > len(x):
        raise ValueError(f"batch_size must lie in [2, {len(x)}] (a std needs 2 rows), got {batch_size}.")
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=tuple(betas))
    model.train()
    rows, order, pos = [], torch.randperm(len(x), generator=gen), 0
    for step in range(steps):
        if pos + batch_size > len(order):  # drop the ragged tail, reshuffle
            order, pos = torch.randperm(len(x), generator=gen), 0
        batch = x[order[pos:pos + batch_size]]
        pos += batch_size
        x_hat, z = model(batch)
        loss = least_volume_loss(x_hat, batch, z, weight, pen, rec)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if log_every and (step % log_every == 0 or step == steps - 1):
            row = {"step": step, "loss": loss.item(), "rec": rec(x_hat, batch).item(), "penalty": pen(z).item()}
            rows.append(row)
            if log is not None:
                log(row)
    model.eval()
    return rows


def pca_autoencoder(x_train: torch.Tensor, latent_dim: int):
    """(encode, decode) of PCA with `latent_dim` components fitted on x_train (n, D): z = (x − μ)Vᵀ,
    x̂ = zV + μ (sklearn's PCA), the linear special case of Least Volume (the paper's PCA theorem)."""
    from sklearn.decomposition import PCA

    pca = PCA(n_components=latent_dim).fit(x_train.double().numpy())
    components = torch.from_numpy(pca.components_).to(x_train.dtype)  # (m, D)
    mean = torch.from_numpy(pca.mean_).to(x_train.dtype)               # (D,)
    return (lambda x: (x - mean) @ components.T), (lambda z: z @ components + mean)


@torch.no_grad()
def evaluate(encode, decode, x: torch.Tensor, keep=(8,), rel_tol: float = 0.05, loss_fn=l2_loss,
             knn_train: tuple[torch.Tensor, torch.Tensor] | None = None, y: torch.Tensor | None = None,
             neighbours: int = 5, chunk: int | None = None) -> dict[str, float]:
    """rec (L_0), rec_at_<k> for k in keep, latent_dim (@rel_tol), importance_corr, std_<i> of
    the sorted latent stds, and knn_acc when `knn_train` = (x_train, y_train) and labels y of x
    are given. All on x (the test split); the pruned copies decoded `chunk` at a time."""
    z = encode(x)
    curve = pruning_curve(encode, decode, x, loss_fn, chunk)
    std = z.std(0)
    rho = explained_reconstruction(encode, decode, x, loss_fn, chunk)
    out = {"rec": float(curve[-1]), "rec_all_pruned": float(curve[0]),
           "latent_dim": latent_dim_from_curve(curve, rel_tol),
           "importance_corr": pearson(std, rho)}
    out.update({f"rec_at_{k}": float(curve[k]) for k in keep})
    out.update({f"std_{i}": float(s) for i, s in enumerate(std.sort(descending=True).values)})
    if knn_train is not None and y is not None:
        out["knn_acc"] = knn_accuracy(encode(knn_train[0]), knn_train[1], z, y, neighbours)
    return out


class PenalizedAutoencoder(torch.nn.Module):
    """What the shared Trainer trains: `training_step(x) -> (J + λ·P(e(x)), logs)` around an
    autoencoder (x (n, D) -> (x̂, z (n, m))); the same objective as `fit_autoencoder`."""

    def __init__(self, autoencoder: torch.nn.Module, penalty: str = "volume", weight: float = 1e-2,
                 eta: float = 1.0, reconstruction: str = "bce"):
        super().__init__()
        if reconstruction not in RECONSTRUCTIONS:
            raise ValueError(f"reconstruction must be 'bce' or 'mse', got {reconstruction!r}.")
        self.autoencoder, self.weight = autoencoder, weight
        self.penalty, self.reconstruction = penalty_fn(penalty, eta), RECONSTRUCTIONS[reconstruction]

    def training_step(self, x: torch.Tensor):
        x_hat, z = self.autoencoder(x)
        rec, pen = self.reconstruction(x_hat, x), self.penalty(z)
        loss = rec + self.weight * pen if self.weight else rec
        return loss, {"rec": rec.detach(), "penalty": pen.detach()}
