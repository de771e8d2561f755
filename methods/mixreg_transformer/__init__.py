"""Transformers learn regression mixtures in context, near Bayes-optimal (Pathak et al., ICLR 2024). See README.md."""
from __future__ import annotations

import json

from hydra.utils import instantiate

from common import tasks
from common.data.sampler import StepSampler
from methods.mixreg_transformer import stages
from methods.mixreg_transformer.em import batch_em, em_step
from methods.mixreg_transformer.loss import normalized_sq_error, prompt_loss
from methods.mixreg_transformer.mixture import MixtureOfRegressions, draw_components
from methods.mixreg_transformer.model import MixRegTransformer, interleave
from methods.mixreg_transformer.plots import nmse_vs_position
from methods.mixreg_transformer.procedures import (argmin_predictions, component_weights, ols_predictions,
                                                   posterior_mean_predictions, posterior_weights,
                                                   prefix_sq_residuals, ridge_predictions, zero_predictions)
from methods.mixreg_transformer.subspace import estimate_subspace, subspace_components, subspace_matrix


def build(cfg) -> MixRegTransformer:
    """The transformer from the config alone; its x width is the mixture's dimension."""
    return instantiate(cfg.method.model, dim=cfg.dataset.mixture.dim)


def training_prompts(cfg, ctx, mixture: MixtureOfRegressions):
    """(batch_fn(step) on this rank's device, (xs, ys) of the prompts EM is fitted on). Fresh
    prompts every step, or with `dataset.train_prompts` a fixed set drawn once (sample efficiency).
    EM is fitted on the first `method.em_prompts` distinct prompts the transformer saw over its
    `max_steps` (at least one step), in the order it first saw them, over all ranks' shards."""
    batch, length = int(cfg.trainer.batch_size), int(cfg.dataset.prompt_length)
    fresh = stages.fresh_prompt_batches(mixture.sample, batch, length, ctx.seed)
    if cfg.dataset.train_prompts is None:
        prompts = stages.fresh_prompt_batches(mixture.sample, batch, length, ctx.seed, ctx.hw.rank, ctx.hw.world_size)
        seen = max(int(cfg.trainer.max_steps), 1) * batch       # never more than the transformer saw
        em_data = stages.seen_prompts(fresh, min(int(cfg.method.em_prompts), seen))
    else:
        n = int(cfg.dataset.train_prompts)
        fixed_xs, fixed_ys = stages.seen_prompts(fresh, n)
        prompts = stages.fixed_prompt_batches(fixed_xs, fixed_ys, batch, ctx.seed, ctx.hw.rank, ctx.hw.world_size)
        trained = stages.first_seen(StepSampler(n, batch, ctx.seed), max(int(cfg.trainer.max_steps), 1),
                                    int(cfg.method.em_prompts))    # the global batch's sampler: every rank's shard
        em_data = fixed_xs[trained], fixed_ys[trained]

    def batch_fn(step: int):
        xs, ys = prompts(step)
        return xs.to(ctx.device), ys.to(ctx.device)
    return batch_fn, em_data


def run(cfg, ctx) -> dict[str, float]:
    """Train the transformer on prompts of the seed's mixture (the shared Trainer), fit EM (and
    with `method.subspace` the subspace algorithm) on the prompts it saw, then score every
    procedure on the same evaluation prompts: metrics named `<procedure>/<metric>` (rows
    transformer, posterior_mean, argmin, ridge, ols, zero, em, and subspace when on). Every scale s of
    `eval.x_scales` adds `<procedure>/nmse_x<s>` on the same prompts with x scaled by s."""
    data = cfg.dataset
    mixture = instantiate(data.mixture, seed=ctx.seed)
    batch_fn, (em_xs, em_ys) = training_prompts(cfg, ctx, mixture)
    em_components = batch_em(em_xs, em_ys, mixture.num_components, mixture.noise_std,
                             iters=int(cfg.method.em_iters), seed=stages.stream_seed(ctx.seed, stages.EM_STREAM),
                             draw=mixture.draw)
    fitted = {"em_components": em_components}
    if cfg.method.subspace:   # the same prompts as EM
        fitted["subspace_components"] = subspace_components(
            em_xs, em_ys, mixture.num_components, mixture.noise_std,
            seed=stages.stream_seed(ctx.seed, stages.SUBSPACE_STREAM), em_iters=int(cfg.method.subspace_em_iters))
    x_scales = [float(s) for s in cfg.eval.x_scales]
    xs, ys, component = stages.test_prompts(mixture, int(data.eval_prompts), int(data.prompt_length), ctx.seed,
                                            split=data.eval_split)

    def evaluate(model) -> dict[str, float]:
        predictions = stages.all_predictions(xs, ys, mixture.components, mixture.noise_std, model=model, **fitted)
        if ctx.hw.is_main:
            curves = stages.nmse_curves(predictions, ys, mixture.dim)
            (ctx.run_dir / "nmse_curves.json").write_text(json.dumps({k: v.tolist() for k, v in curves.items()}))
            nmse_vs_position(curves, ctx.run_dir / "nmse_vs_position.png",
                             f"d = {mixture.dim}, m = {mixture.num_components}, σ = {mixture.noise_std:g} ({data.eval_split})",
                             noise_floor=mixture.noise_std ** 2 / mixture.dim)
        rows = stages.procedure_metrics(predictions, ys, mixture.dim)
        if x_scales:
            shifted = stages.shifted_metrics(xs, ys, component, mixture.components, mixture.noise_std, x_scales,
                                             model=model, **fitted)
            for name, extra in shifted.items():
                rows[name].update(extra)
        return {f"{name}/{key}": value for name, row in rows.items() for key, value in row.items()}

    metrics = tasks.fit_and_evaluate(ctx, build(cfg), batch_fn, evaluate)
    if "train_loss" in metrics:   # the transformer's, so it lands in its row
        metrics["transformer/train_loss"] = metrics.pop("train_loss")
    return metrics


__all__ = ["MixtureOfRegressions", "draw_components", "ridge_predictions", "zero_predictions", "posterior_weights", "posterior_mean_predictions", "argmin_predictions",
           "ols_predictions", "batch_em", "MixRegTransformer", "component_weights", "prefix_sq_residuals",
           "em_step", "subspace_components", "subspace_matrix", "estimate_subspace", "interleave", "prompt_loss",
           "normalized_sq_error", "build", "run"]
