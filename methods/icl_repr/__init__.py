"""In-context learning with representations (Guo et al., ICLR 2024): transformers learn
y = ⟨w, Φ*(x)⟩ in context, near the Bayes-optimal ridge on Φ*(x). See README.md."""
from __future__ import annotations

import copy
import json

from hydra.utils import instantiate

from common import tasks
from common.icl import ICLTransformer, fresh_prompt_batches, ridge_predictions
from methods.icl_repr import stages
from methods.icl_repr.controls import RandomReluFeatures
from methods.icl_repr.plots import risk_vs_position
from methods.icl_repr.probes import probe_curves, probe_metrics, probe_r2
from methods.icl_repr.procedures import (affine_features, bayes_predictions, choose_lambda, prefix_mean_predictions,
                                         risks)
from methods.icl_repr.representation import PromptSampler, RandomRepresentation, haar_matrix, sample_prompts


def build(cfg) -> ICLTransformer:
    """The transformer from the config alone; its x width is Φ*'s input dimension."""
    return instantiate(cfg.method.model, dim=cfg.dataset.representation.dim)


def run(cfg, ctx) -> dict[str, float]:
    """Train the transformer on fresh prompts of the seed's Φ* (the shared Trainer), then score every
    row on the same evaluation prompts (metrics `<row>/<metric>`: transformer, untrained (the same
    model at step 0), bayes, ridge_affine, ridge_x, prefix_mean, and the controls ridge_rff (random
    ReLU features of x) and ridge_wrong_phi (the Bayes rule of a wrong Φ'); risk, risk_late) and probe
    the trained and untrained models' hidden states (rows transformer_probe, untrained_probe, and the
    control wrong_phi_probe)."""
    data, method = cfg.dataset, cfg.method
    spec = data.representation
    rep = stages.representation(ctx.seed, int(spec.dim), int(spec.rep_dim), int(spec.depth), float(spec.leak))
    noise, length = float(data.noise_std), int(data.prompt_length)
    prompts = fresh_prompt_batches(PromptSampler(rep, noise), int(cfg.trainer.batch_size), length, ctx.seed,
                                   ctx.hw.rank, ctx.hw.world_size)

    def batch_fn(step: int):
        xs, ys = prompts(step)
        return xs.to(ctx.device), ys.to(ctx.device)

    wrong_rep = stages.wrong_representation(ctx.seed, int(spec.dim), int(spec.rep_dim), int(spec.depth),
                                            float(spec.leak))
    rff = stages.random_features(ctx.seed, int(spec.dim), int(method.random_features))
    val_xs, val_ys, _ = stages.stream_prompts(rep, int(data.val_prompts), length, noise, ctx.seed, stages.VAL_STREAM)
    lambdas = stages.chosen_lambdas(rep, val_xs, val_ys, [float(v) for v in method.ridge_lambdas], rff)
    xs, ys, _ = stages.eval_prompts(rep, int(data.eval_prompts), length, noise, ctx.seed, split=data.eval_split)
    probe_xs, probe_ys, _ = stages.stream_prompts(rep, int(data.probe_prompts), length, noise, ctx.seed,
                                                  stages.PROBE_STREAM)
    model = build(cfg)
    untrained = copy.deepcopy(model)      # the same initial weights, never trained

    def evaluate(trained) -> dict[str, float]:
        models = {"transformer": trained, "untrained": untrained.to(ctx.device)}
        predictions = stages.all_predictions(xs, ys, rep, noise, lambdas, models, rff, wrong_rep)
        rows = stages.risk_metrics(predictions, ys)
        probes, per_layer = stages.probe_rows(models, rep, noise, probe_xs, probe_ys, float(method.probe_alpha),
                                              wrong_rep)
        rows.update(probes)
        for name in stages.LINEAR_ROWS:
            rows[name]["lam"] = lambdas[name]
        if ctx.hw.is_main:
            risk_curves = stages.curves(predictions, ys)
            (ctx.run_dir / "risk_curves.json").write_text(json.dumps({"risk": risk_curves, "probes": per_layer}))
            risk_vs_position(risk_curves, ctx.run_dir / "risk_vs_position.png",
                             f"d = {rep.dim}, D = {rep.rep_dim}, L = {rep.depth}, σ = {noise:g} ({data.eval_split})",
                             noise_floor=noise ** 2)
        return {f"{name}/{key}": value for name, row in rows.items() for key, value in row.items()}

    metrics = tasks.fit_and_evaluate(ctx, model, batch_fn, evaluate)
    if "train_loss" in metrics:   # the transformer's, so it lands in its row
        metrics["transformer/train_loss"] = metrics.pop("train_loss")
    return metrics


__all__ = ["RandomReluFeatures", "RandomRepresentation", "haar_matrix", "sample_prompts", "PromptSampler", "bayes_predictions",
           "affine_features", "prefix_mean_predictions", "probe_r2", "probe_curves", "probe_metrics", "risks",
           "choose_lambda", "ridge_predictions", "ICLTransformer", "build", "run"]
