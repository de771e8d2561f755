"""The stages of a run, as plain functions: the seed's streams (Φ*, training, validation, test and
probe prompts), every procedure's predictions on the evaluation prompts, the table's metrics."""
from __future__ import annotations

import torch

from common.icl.predictions import ridge_predictions, transformer_predictions
from common.icl.prompts import TRAIN_STREAM, stream_seed
from methods.icl_repr.controls import RandomReluFeatures
from methods.icl_repr.procedures import (affine_features, bayes_predictions, choose_lambda, prefix_mean_predictions,
                                         risk_curve, risks)
from methods.icl_repr.probes import low_max, probe_curves, probe_metrics
from methods.icl_repr.representation import RandomRepresentation, sample_prompts

# independent streams of the run seed (training prompts: common.icl's TRAIN_STREAM, keyed by step);
# the controls' draws: a wrong Φ' (another random MLP of Φ*'s architecture) and the random features
TEST_STREAM, VAL_STREAM, REP_STREAM, PROBE_STREAM, WRONG_REP_STREAM, RFF_STREAM = 0, 2, 3, 4, 5, 7
assert TRAIN_STREAM not in (TEST_STREAM, VAL_STREAM, REP_STREAM, PROBE_STREAM, WRONG_REP_STREAM, RFF_STREAM)
EVAL_STREAMS = {"test": TEST_STREAM, "val": VAL_STREAM}
# the rows whose ridge λ is chosen on validation prompts: on x, on [x, 1], on random ReLU features of x
LINEAR_ROWS = ("ridge_x", "ridge_affine", "ridge_rff")


def representation(seed: int, dim: int, rep_dim: int, depth: int = 2, leak: float = 0.01) -> RandomRepresentation:
    """Φ* of the run seed, from a stream of its own."""
    return RandomRepresentation(dim, rep_dim, depth, leak, seed=stream_seed(seed, REP_STREAM))


def wrong_representation(seed: int, dim: int, rep_dim: int, depth: int = 2, leak: float = 0.01) -> RandomRepresentation:
    """Φ' of the run seed: a random MLP of Φ*'s architecture from a stream of its own (a wrong Φ)."""
    return RandomRepresentation(dim, rep_dim, depth, leak, seed=stream_seed(seed, WRONG_REP_STREAM))


def random_features(seed: int, dim: int, num_features: int) -> RandomReluFeatures:
    """The random ReLU features of x of the run seed, from a stream of their own."""
    return RandomReluFeatures(dim, num_features, seed=stream_seed(seed, RFF_STREAM))


def stream_prompts(rep: RandomRepresentation, num: int, length: int, noise_std: float, seed: int, stream: int):
    """(xs, ys, ws) of `num` prompts from the stream (seed, stream)."""
    gen = torch.Generator().manual_seed(stream_seed(seed, stream))
    return sample_prompts(rep, num, length, noise_std, gen)


def eval_prompts(rep, num: int, length: int, noise_std: float, seed: int, split: str = "test"):
    """The evaluation prompts: the test stream, or with split="val" the validation stream (tuning)."""
    if split not in EVAL_STREAMS:
        raise ValueError(f"split must be one of {sorted(EVAL_STREAMS)}, got '{split}'")
    return stream_prompts(rep, num, length, noise_std, seed, EVAL_STREAMS[split])


def linear_features(name: str, xs: torch.Tensor, rff: RandomReluFeatures | None = None) -> torch.Tensor:
    if name == "ridge_x":
        return xs
    if name == "ridge_affine":
        return affine_features(xs)
    if name == "ridge_rff" and rff is not None:
        return rff.features(xs)
    raise ValueError(f"no features for row '{name}' (ridge_rff needs the random features)")


def chosen_lambdas(rep, val_xs, val_ys, lambdas, rff: RandomReluFeatures | None = None) -> dict[str, float]:
    """{ridge_x, ridge_affine (, ridge_rff with `rff`): λ} chosen on validation prompts (least risk_late)."""
    names = LINEAR_ROWS if rff is not None else LINEAR_ROWS[:2]
    return {name: choose_lambda(linear_features(name, val_xs, rff), val_ys, lambdas) for name in names}


def all_predictions(xs, ys, rep, noise_std: float, lambdas: dict[str, float], models: dict | None = None,
                    rff: RandomReluFeatures | None = None, wrong_rep: RandomRepresentation | None = None) -> dict:
    """{row: predictions (B, k)} on the same prompts: each model of `models` (transformer, untrained),
    bayes (ridge on Φ*(x), λ = σ²D), ridge_x, ridge_affine (and ridge_rff with `rff`) at their chosen
    λ, prefix_mean; with `wrong_rep`, ridge_wrong_phi: the Bayes rule of a wrong Φ' (ridge on Φ'(x),
    λ = σ²D)."""
    preds = {name: transformer_predictions(model, xs, ys) for name, model in (models or {}).items()}
    preds["bayes"] = bayes_predictions(xs, ys, rep, noise_std)
    for name in lambdas:
        preds[name] = ridge_predictions(linear_features(name, xs, rff), ys, lambdas[name])
    if wrong_rep is not None:
        preds["ridge_wrong_phi"] = bayes_predictions(xs, ys, wrong_rep, noise_std)
    preds["prefix_mean"] = prefix_mean_predictions(ys)
    return preds


def risk_metrics(predictions: dict, ys: torch.Tensor) -> dict[str, dict[str, float]]:
    return {name: risks(p, ys) for name, p in predictions.items()}


def curves(predictions: dict, ys: torch.Tensor) -> dict[str, list[float]]:
    return {name: risk_curve(p, ys).tolist() for name, p in predictions.items()}


def probe_rows(models: dict, rep, noise_std: float, xs, ys, alpha: float,
               wrong_rep: RandomRepresentation | None = None) -> tuple[dict, dict]:
    """({<name>_probe: probe metrics}, {<name>: per-layer curves}) of each model on the probe prompts.
    With `wrong_rep` and both models `transformer` and `untrained`: phi_gain_low, what training added
    to the lower blocks' R² of Φ*(x) (transformer_probe: trained minus untrained), and its control,
    row wrong_phi_probe: the same gain for a wrong Φ'(x) (phi_r2_low: the trained model's R² of Φ')."""
    phi, bayes = rep.rep(xs), bayes_predictions(xs, ys, rep, noise_std)
    wrong = wrong_rep.rep(xs) if wrong_rep is not None else None
    rows, per_layer = {}, {}
    for name, model in models.items():
        per_layer[name] = probe_curves(model, xs, ys, phi, bayes, alpha, wrong_phi=wrong)
        rows[f"{name}_probe"] = probe_metrics(per_layer[name])
    if wrong is not None and {"transformer", "untrained"} <= set(models):
        trained, untrained = per_layer["transformer"], per_layer["untrained"]
        rows["transformer_probe"]["phi_gain_low"] = low_max(trained["phi_x"]) - low_max(untrained["phi_x"])
        rows["wrong_phi_probe"] = {"phi_r2_low": low_max(trained["wphi_x"]),
                                   "phi_gain_low": low_max(trained["wphi_x"]) - low_max(untrained["wphi_x"])}
    return rows, per_layer
