"""Least Volume: compressing the latent space of an autoencoder (Chen & Fuge, ICLR 2024). See README.md."""
from __future__ import annotations

from pathlib import Path

import torch
from hydra.utils import instantiate

from common import tasks
from common.config import UserError
from common.hardware import seed_everything
from methods.least_volume.data import (IMAGE_SETS, digits_splits, image_splits, manifold_map, manifold_samples,
                                       manifold_splits, mnist)
from methods.least_volume.lipschitz import SpectralNormConv, spectral_norm_conv
from methods.least_volume.loss import (bce_reconstruction, l1_std_penalty, lasso_penalty, least_volume_loss,
                                       mse_reconstruction, student_t_penalty, volume_penalty)
from methods.least_volume.metrics import (explained_reconstruction, importance_correlation, knn_accuracy, l2_loss,
                                          latent_dim, pruned_latents, pruned_loss, pruning_curve)
from methods.least_volume.plots import trade_off_plot
from methods.least_volume.model import Autoencoder, ConvDecoder, ConvEncoder, ConvLeastVolumeAE, LeastVolumeAE
from methods.least_volume.train import PenalizedAutoencoder, evaluate, fit_autoencoder, pca_autoencoder

PENALTY_ROWS = ("volume", "l1", "lasso", "student_t", "none", "pca", "pixels")
TRAINED = ("volume", "l1", "lasso", "student_t", "none")


def build(cfg) -> Autoencoder:
    """The autoencoder of `method.model` from the config alone."""
    return instantiate(cfg.method.model)


def splits(cfg) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{'train', 'val', 'test'}: (x (n, D) or images (n, C, S, S), labels or the manifold's
    coordinates u). Images need the conv model (its `size` is the side they are resized to)."""
    d, m = cfg.dataset, cfg.method
    if d.name == "digits":
        return digits_splits(m.val_share, d.root)
    if d.name == "manifold":
        return manifold_splits(d.n_train, d.n_val, d.n_test, d.intrinsic_dim, d.ambient_dim, d.map_seed)
    if d.name in IMAGE_SETS:
        if "size" not in m.model:
            raise UserError(f"dataset {d.name} holds images; they need the conv autoencoder "
                            f"(experiment=least_volume_mnist, or method/least_volume_model@method.model=conv)",
                            exit_code=2)
        return image_splits(d.name, d.root, d.download, m.model.size, m.val_share, d.train_size, d.test_size)
    raise UserError(f"least_volume runs on dataset digits, manifold, {', '.join(IMAGE_SETS)}; got '{d.name}'",
                    exit_code=2)


def _check_input(cfg, x: torch.Tensor) -> None:
    m, name = cfg.method.model, cfg.dataset.name
    if "in_dim" in m and (x.dim() != 2 or x.shape[1] != m.in_dim):
        raise UserError(f"method.model.in_dim is {m.in_dim} but {name} has inputs of shape {tuple(x.shape[1:])}",
                        exit_code=2)
    if "in_channels" in m and x.shape[1] != m.in_channels:
        raise UserError(f"method.model.in_channels is {m.in_channels} but {name} has {x.shape[1]} channels",
                        exit_code=2)


def _check_sweep(sweep) -> None:
    bad = sorted({str(p) for p in sweep.penalties.values()} - set(TRAINED))
    if bad or not len(sweep.penalties) or not len(sweep.weights):
        raise UserError(f"method.sweep needs penalties (name: one of {', '.join(TRAINED)}) and weights (λ values); "
                        f"got penalties {dict(sweep.penalties)}, weights {list(sweep.weights)}", exit_code=2)
    if any(float(w) <= 0 for w in sweep.weights):
        raise UserError(f"method.sweep.weights must be positive λ values, got {list(sweep.weights)}", exit_code=2)


def run(cfg, ctx) -> dict[str, float]:
    """Train the autoencoder on J + λ·P (method.penalty: volume | l1 | lasso | student_t | none)
    with the shared Trainer, or fit PCA (method.penalty = pca, no training), or take the raw
    inputs as the latent codes (pixels: encode = decode = identity, no training); then on
    `eval.split` (test, or val for tuning): rec (L2), rec_at_<k>, latent_dim@δ, corr(σ, ρ), the
    sorted latent stds, and the k-NN accuracy on z where the data has labels (digits and the
    image sets). With `method.sweep` set, every penalty x λ of the sweep instead, each a stage
    from the same initialisation and batch order, reported as `<name>_<λ>/<metric>` (a table row
    each), and the trade-off figure `trade_off.png` in the run dir."""
    m, ev = cfg.method, cfg.eval
    if m.penalty not in PENALTY_ROWS:
        raise UserError(f"method.penalty must be one of {', '.join(PENALTY_ROWS)}, got '{m.penalty}'", exit_code=2)
    if m.sweep is not None:
        _check_sweep(m.sweep)
    data = splits(cfg)
    if ev.split not in data:
        raise UserError(f"eval.split is {ev.split} but {cfg.dataset.name} has no such split here "
                        f"(method.val_share = {m.val_share})", exit_code=2)
    x_train, y_train = data["train"]
    x_eval, y_eval = data[ev.split]
    _check_input(cfg, x_train)
    labelled = cfg.dataset.name != "manifold"
    dev = ctx.device
    knn = dict(knn_train=(x_train.to(dev), y_train), y=y_eval, neighbours=ev.k) if labelled else {}
    scores = dict(keep=tuple(ev.keep), rel_tol=ev.rel_tol, loss_fn=l2_loss, chunk=ev.chunk, **knn)
    if m.penalty in ("pca", "pixels") and m.sweep is None:
        if x_train.dim() != 2:
            raise UserError(f"method.penalty={m.penalty} runs on flat inputs (digits, manifold), not images",
                            exit_code=2)
        if m.penalty == "pixels":   # the naive control: the inputs themselves as the code
            return evaluate(lambda x: x, lambda z: z, x_eval, **scores)
        encode, decode = pca_autoencoder(x_train, m.model.latent_dim)
        return evaluate(encode, decode, x_eval, **scores)
    x_dev, x_eval = x_train.to(dev), x_eval.to(dev)
    sampler = ctx.sampler(len(x_train))

    def fit(penalty: str, weight: float, stage: str | None) -> dict[str, float]:
        model = PenalizedAutoencoder(build(cfg), penalty, weight, m.eta, m.reconstruction).to(dev)

        def metrics(trained):  # in eval mode, without gradients, on the run's device
            ae = trained.autoencoder
            return evaluate(ae.encode, ae.decode, x_eval, **scores)
        return tasks.fit_and_evaluate(ctx, model, lambda step: x_dev[sampler(step)], metrics, stage=stage)

    if m.sweep is None:
        return fit(m.penalty, m.weight, None)
    out, points = {}, {}
    for name, penalty in m.sweep.penalties.items():
        for weight in m.sweep.weights:
            seed_everything(ctx.seed)   # every stage starts from the initialisation a single run of this seed draws
            row = f"{name}_{float(weight):.0e}".replace("e-0", "e-")
            res = fit(str(penalty), float(weight), row)
            out |= {f"{row}/{k}": v for k, v in res.items()}
            points.setdefault(name, []).append((float(weight), res["rec"], res["latent_dim"]))
    trade_off_plot(points, Path(ctx.run_dir) / "trade_off.png", ev.rel_tol,
                   f"{cfg.dataset.name} ({ev.split} split, seed {ctx.seed})")
    return out


__all__ = ["IMAGE_SETS", "PENALTY_ROWS", "Autoencoder", "ConvDecoder", "ConvEncoder", "ConvLeastVolumeAE",
           "LeastVolumeAE", "PenalizedAutoencoder", "SpectralNormConv", "bce_reconstruction", "build", "digits_splits",
           "evaluate", "explained_reconstruction", "fit_autoencoder", "image_splits", "importance_correlation",
           "knn_accuracy", "l1_std_penalty", "l2_loss", "lasso_penalty", "latent_dim", "least_volume_loss",
           "manifold_map", "manifold_samples", "manifold_splits", "mnist", "mse_reconstruction", "pca_autoencoder",
           "pruned_latents", "pruned_loss", "pruning_curve", "run", "spectral_norm_conv", "splits",
           "student_t_penalty", "trade_off_plot", "volume_penalty"]
