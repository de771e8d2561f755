"""Riemannian Flow Matching on general geometries (ICLR 2024). See README.md."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from common import data, runner
from common.data.manifold_data import load_earth, sample_ramachandran
from common.trainer import Trainer
from methods.rfm.baselines import VMFMixture
from methods.rfm.loss import euclidean_fm_loss, rfm_loss
from methods.rfm.manifolds import FlatTorus, Sphere
from methods.rfm.mesh import SpectralMesh, icosphere
from methods.rfm.model import VectorField, ema
from methods.rfm.ode import divergence, log_likelihood, sample
from methods.rfm.path import conditional_path, premetric_field
from methods.rfm.plots import density_map


class FlowMatching(nn.Module):
    """The trained field plus its EMA copy; `training_step` draws x0 ~ uniform and t ~ U[0, 1]."""

    def __init__(self, manifold, cfg):
        super().__init__()
        self.manifold, self.variant = manifold, cfg.variant
        self.field = VectorField(manifold, cfg.hidden, cfg.layers, project=cfg.variant == "riemannian")
        self.ema = ema(self.field, cfg.ema_decay)   # a submodule, so checkpoints carry it and its count

    def training_step(self, x1: torch.Tensor):
        # EMA of the weights as they stand after the previous optimiser step
        self.ema.update_parameters(self.field)
        x0 = self.manifold.random_uniform(len(x1), dtype=x1.dtype)
        t = torch.rand(len(x1), dtype=x1.dtype)
        if self.variant == "riemannian":
            return rfm_loss(self.field, self.manifold, x0, x1, t), {}
        return euclidean_fm_loss(self.field, x0, x1, t), {}

    def eval_field(self) -> VectorField:
        """The EMA field, projected onto the tangent space (the ablation is projected only here)."""
        self.ema.module.project = True
        return self.ema.module


def load_points(ds, seed: int) -> tuple[object, dict[str, torch.Tensor]]:
    """(manifold, {train, val, test}) with a random 80/10/10 split per seed."""
    if ds.kind == "earth":
        manifold, x = Sphere(), load_earth(ds.name, ds.root, ds.download)
    elif ds.kind == "ramachandran":
        manifold, x = FlatTorus(2), sample_ramachandran(ds.num_samples, ds.name, seed=ds.sample_seed)
    else:
        raise ValueError(f"dataset.kind must be 'earth' or 'ramachandran', got '{ds.kind}'")
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_train, n_val = int(0.8 * len(x)), int(0.1 * len(x))
    parts = {"train": order[:n_train], "val": order[n_train:n_train + n_val], "test": order[n_train + n_val:]}
    return manifold, {k: x[v] for k, v in parts.items()}


def run(cfg) -> dict[str, float]:
    """Train v_θ by (Riemannian or Euclidean-then-projected) flow matching; report test NLL in
    nats beside the uniform density and (on S²) a von Mises-Fisher mixture fit by EM."""
    ctx = runner.start(cfg)
    torch.set_default_dtype(torch.float64)  # likelihoods integrate small divergences: keep float64
    try:
        m = cfg.method
        manifold, split = load_points(cfg.dataset, cfg.seed)
        model = FlowMatching(manifold, m)
        train = split["train"]
        batch = min(cfg.trainer.batch_size, len(train))
        sampler = data.StepSampler(len(train), batch, cfg.seed, ctx.hw.rank, ctx.hw.world_size)
        trainer = Trainer(model, cfg.trainer, ctx.hw, ctx.run_dir, ctx.logger, batch_fn=lambda s: train[sampler(s)])
        last = trainer.fit(resume=cfg.resume)
        field = model.eval_field()
        nll = -log_likelihood(field, manifold, split["test"], m.ode_steps, exact=True)
        metrics = {"test_nll": float(nll.mean()), "uniform_nll": manifold.log_volume,
                   "train_loss": last.get("loss", float("nan"))}
        if isinstance(manifold, Sphere):
            vmf = VMFMixture(m.vmf_components, seed=cfg.seed).fit(torch.cat([train, split["val"]]))
            metrics["vmf_nll"] = float(-vmf.log_prob(split["test"]).mean())
            if m.plot and cfg.seed in m.plot_seeds:
                density_map(lambda x: log_likelihood(field, manifold, x, m.plot_ode_steps),
                            torch.cat(list(split.values())), Path(cfg.run_dir) / "density_map.png",
                            f"{m.variant} flow matching density ({cfg.dataset.name})")
    finally:
        torch.set_default_dtype(torch.float32)
    ctx.logger.log(metrics, trainer.step)
    ctx.logger.close()
    return metrics


__all__ = ["FlatTorus", "Sphere", "SpectralMesh", "icosphere", "VectorField", "ema", "VMFMixture", "conditional_path", "premetric_field",
           "rfm_loss", "euclidean_fm_loss", "divergence", "log_likelihood", "sample", "run"]
