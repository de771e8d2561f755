"""The stages of a run, as plain functions: the seed's streams (Φ*, training, validation, test and
probe prompts), every procedure's predictions on the evaluation prompts, the table's metrics."""
from __future__ import annotations

import torch

from common.icl.predictions import ridge_predictions, transformer_predictions
from common.icl.prompts import TRAIN_STREAM, stream_seed
from methods.icl_repr.procedures import (affine_features, bayes_predictions, choose_lambda, prefix_mean_predictions,
                                         risk_curve, risks)
from methods.icl_repr.probes import probe_curves, probe_metrics
from methods.icl_repr.representation import RandomRepresentation, sample_prompts

# independent streams of the run seed (training prompts: common.icl's TRAIN_STREAM, keyed by step)
TEST_STREAM, VAL_STREAM, REP_STREAM, PROBE_STREAM = 0, 2, 3, 4
assert TRAIN_STREAM not in (TEST_STREAM, VAL_STREAM, REP_STREAM, PROBE_STREAM)
EVAL_STREAMS = {"test": TEST_STREAM, "val": VAL_STREAM}
LINEAR_ROWS = ("ridge_x", "ridge_affine")


def representation(seed: int, dim: int, rep_dim: int, depth: int = 2, leak: float = 0.01) -> RandomRepresentation:
    """Φ* of the run seed, from a stream of its own."""
    return RandomRepresentation(dim, rep_dim, depth, leak, seed=stream_seed(seed, REP_STREAM))


def stream_prompts(rep: RandomRepresentation, num: int, length: int, noise_std: float, seed: int, stream: int):
    """(xs, ys, ws) of `num` prompts from the stream (seed, stream)."""
    gen = torch.Generator().manual_seed(stream_seed(seed, stream))
    return sample_prompts(rep, num, length, noise_std, gen)


def eval_prompts(rep, num: int, length: int, noise_std: float, seed: int, split: str = "test"):
    """The evaluation prompts: the test stream, or with split="val" the validation stream (tuning)."""
    if split not in EVAL_STREAMS:
        raise ValueError(f"split must be one of {sorted(EVAL_STREAMS)}, got '{split}'")
    return stream_prompts(rep, num, length, noise_std, seed, EVAL_STREAMS[split])


def linear_features(name: str, xs: torch.Tensor) -> torch.Tensor:
    return xs if name == "ridge_x" else affine_features(xs)


def chosen_lambdas(rep, val_xs, val_ys, lambdas) -> dict[str, float]:
    """{ridge_x, ridge_affine: λ} chosen on validation prompts (least risk_late)."""
    return {name: choose_lambda(linear_features(name, val_xs), val_ys, lambdas) for name in LINEAR_ROWS}


def all_predictions(xs, ys, rep, noise_std: float, lambdas: dict[str, float], models: dict | None = None) -> dict:
    """{row: predictions (B, k)} on the same prompts: each model of `models` (transformer, untrained),
    bayes (ridge on Φ*(x), λ = σ²D), ridge_x and ridge_affine at their chosen λ, prefix_mean."""
    preds = {name: transformer_predictions(model, xs, ys) for name, model in (models or {}).items()}
    preds["bayes"] = bayes_predictions(xs, ys, rep, noise_std)
    for name in LINEAR_ROWS:
        preds[name] = ridge_predictions(linear_features(name, xs), ys, lambdas[name])
    preds["prefix_mean"] = prefix_mean_predictions(ys)
    return preds


def risk_metrics(predictions: dict, ys: torch.Tensor) -> dict[str, dict[str, float]]:
    return {name: risks(p, ys) for name, p in predictions.items()}


def curves(predictions: dict, ys: torch.Tensor) -> dict[str, list[float]]:
    return {name: risk_curve(p, ys).tolist() for name, p in predictions.items()}


def probe_rows(models: dict, rep, noise_std: float, xs, ys, alpha: float) -> tuple[dict, dict]:
    """({<name>_probe: probe metrics}, {<name>: per-layer curves}) of each model on the probe prompts."""
    phi, bayes = rep.rep(xs), bayes_predictions(xs, ys, rep, noise_std)
    rows, per_layer = {}, {}
    for name, model in models.items():
        per_layer[name] = probe_curves(model, xs, ys, phi, bayes, alpha)
        rows[f"{name}_probe"] = probe_metrics(per_layer[name])
    return rows, per_layer
