"""Riemannian Flow Matching on general geometries (ICLR 2024). See README.md."""
from __future__ import annotations

import copy
from pathlib import Path

import torch
from hydra.utils import instantiate

from common import tasks
from common.callbacks import EMA, BestOnValidation
from common.config import UserError
from common.data.manifold_data import load_earth, sample_ramachandran
from common.eval import mean_nll
from methods.rfm.baselines import VMFMixture
from methods.rfm.loss import projected_euclidean_loss, rfm_loss, rfm_loss_on_path
from methods.rfm.manifolds import FlatTorus, Sphere
from methods.rfm.mesh import Mesh, bumpy_sphere, icosphere
from methods.rfm.mesh_data import EigenfunctionDensity
from methods.rfm.model import FlowMatching, VectorField
from methods.rfm.ode import divergence, log_likelihood, sample
from methods.rfm.path import SimulatedPaths, conditional_path, premetric_field, premetric_path, stratified_times
from methods.rfm.plots import density_map

KINDS = ("earth", "ramachandran", "mesh")


def manifold_of(cfg):
    """The dataset's manifold: S² (earth), T² (Ramachandran) or the mesh `dataset.surface` with the
    premetric's eigenpairs from `method.mesh`."""
    kind = cfg.dataset.kind
    if kind == "earth":
        return Sphere()
    if kind == "ramachandran":
        return FlatTorus(2)
    if kind == "mesh":
        return instantiate(cfg.method.mesh, *bumpy_sphere(**cfg.dataset.surface))
    raise UserError(f"dataset.kind must be one of {KINDS}, got '{kind}'", exit_code=2)


def build(cfg, manifold=None) -> FlowMatching:
    """The model from the config alone (the manifold from `dataset.kind`, no data)."""
    manifold = manifold_of(cfg) if manifold is None else manifold
    return instantiate(cfg.method.flow, field=instantiate(cfg.method.model, manifold=manifold), manifold=manifold)


def load_points(ds) -> tuple[torch.Tensor, EigenfunctionDensity | None]:
    """(all points (N, ambient) float64, the target density when it is known: meshes)."""
    if ds.kind == "earth":
        return load_earth(ds.name, ds.root, ds.download), None
    if ds.kind == "ramachandran":
        return sample_ramachandran(ds.num_samples, ds.name, seed=ds.sample_seed), None
    density = EigenfunctionDensity(*bumpy_sphere(**ds.surface), k=ds.eigenfunction)
    return density.sample(ds.num_samples, ds.sample_seed), density


def split_points(x: torch.Tensor, seed: int, *, val: float, test: float, test_seed: int) -> dict[str, torch.Tensor]:
    """{train, val, test}: the test split is fixed by `test_seed` (no run seed, no tuning run reads
    it); the run's seed re-draws the train/val split of the rest."""
    if not (0 < val and 0 < test and val + test < 1):
        raise ValueError(f"split fractions need 0 < val, 0 < test, val + test < 1, got val={val}, test={test}")
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(test_seed))
    n_test, n_val = int(test * len(x)), int(val * len(x))
    rest = order[n_test:][torch.randperm(len(x) - n_test, generator=torch.Generator().manual_seed(seed))]
    return {"train": x[rest[n_val:]], "val": x[rest[:n_val]], "test": x[order[:n_test]]}


def run(cfg, ctx) -> dict[str, float]:
    """Train v_θ by Riemannian (or projected Euclidean) flow matching with an EMA of its weights
    (with `trainer.eval_every`: the EMA weights of the best validation NLL, early stopping after
    `method.early_stopping_patience` evaluations without a gain); report the EMA field's NLL (nats)
    on `eval.splits` beside the uniform density, a von Mises-Fisher mixture (S²) and the target
    density itself (meshes)."""
    m, e = cfg.method, cfg.eval
    points, target = load_points(cfg.dataset)
    split = split_points(points, ctx.seed, **m.data_split)
    manifold = manifold_of(cfg)
    model = build(cfg, manifold)
    ema = EMA(model.field, decay=m.ema_decay)          # the official warm-up, after every optimiser step
    train = split["train"]
    sampler = ctx.sampler(len(train))
    if isinstance(manifold, Mesh):   # paths by simulation, one solve per path_steps + 2 steps
        batches = instantiate(m.mesh_paths, mesh=manifold, points=train, sampler=sampler, seed=ctx.seed)
    else:
        batches = lambda step: train[sampler(step)].to(ctx.device)  # noqa: E731

    def float64_ema() -> VectorField:
        """A float64 copy of the EMA field: fixed-step RK4 sums many small divergences."""
        return copy.deepcopy(ema.module).double()

    def nll(field, x: torch.Tensor) -> float:
        return mean_nll(log_likelihood(field, manifold, x.to(ctx.device), e.ode_steps, exact=e.exact_divergence))

    callbacks, eval_fn = [ema], None
    if cfg.trainer.eval_every:   # the official protocol: keep the EMA weights of the best validation NLL
        callbacks.append(BestOnValidation(ema.module, "val_nll", mode="min", patience=m.early_stopping_patience))
        eval_fn = lambda _, step: {"val_nll": nll(float64_ema(), split["val"])}  # noqa: E731

    def evaluate(_) -> dict[str, float]:
        field = float64_ema()
        out = {"uniform_nll": manifold.log_volume}
        vmf = VMFMixture(m.vmf_components, seed=ctx.seed).fit(train) if isinstance(manifold, Sphere) else None
        for name in e.splits:
            x = split[name]
            out[f"{name}_nll"] = nll(field, x)
            if vmf is not None:
                out[f"vmf_{name}_nll"] = mean_nll(vmf.log_prob(x))
            if target is not None:
                face, bary, _ = manifold.locate(x)
                out[f"target_{name}_nll"] = mean_nll(target.log_prob(bary, face))
        if e.mass_points:   # ∫ p = E_uniform[p / p0]: 1 when the likelihood is exact
            uniform = manifold.random_uniform(e.mass_points, generator=torch.Generator().manual_seed(ctx.seed))
            ratio = (log_likelihood(field, manifold, uniform.to(ctx.device), e.ode_steps, exact=e.exact_divergence)
                     + manifold.log_volume).exp()
            out["mass"] = float(ratio.mean())
        if m.plot and ctx.seed in m.plot_seeds and isinstance(manifold, Sphere) and ctx.hw.is_main:
            density_map(lambda x: log_likelihood(field, manifold, x, m.plot_ode_steps), points,
                        Path(ctx.run_dir) / "density_map.png", f"{model.variant} flow matching density ({cfg.dataset.name})")
        return out

    return tasks.fit_and_evaluate(ctx, model, batches, evaluate,
                                  eval_fn=eval_fn, callbacks=callbacks, final=lambda: ema.module)


__all__ = ["EigenfunctionDensity", "FlatTorus", "FlowMatching", "Mesh", "SimulatedPaths", "Sphere", "VMFMixture",
           "VectorField", "build", "bumpy_sphere", "conditional_path", "divergence", "icosphere", "log_likelihood",
           "premetric_field", "premetric_path", "projected_euclidean_loss", "rfm_loss", "rfm_loss_on_path",
           "run", "sample", "split_points", "stratified_times"]
