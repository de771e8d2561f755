"""The stages of a run, as plain functions: prompt streams for training, the shared test
prompts, every procedure's predictions on them, and the table's metrics and curves."""
from __future__ import annotations

import numpy as np
import torch

from common.data.sampler import StepSampler
# the prompt streams and the model's predictions live in common/icl since issue #49
from common.icl.predictions import transformer_predictions
from common.icl.prompts import fixed_prompt_batches, fresh_prompt_batches, seen_prompts, stream_seed  # noqa: F401
from methods.mixreg_transformer.em import batch_em
from methods.mixreg_transformer.loss import normalized_sq_error
from methods.mixreg_transformer.mixture import MixtureOfRegressions
from methods.mixreg_transformer.procedures import (argmin_predictions, ols_predictions, posterior_mean_predictions,
                                                   ridge_predictions, zero_predictions)

# independent streams of the run seed; EM's initial draw must not reuse the seed that drew the
# mixture (the same generator state would start EM at the true components)
TEST_STREAM, TRAIN_STREAM, VAL_STREAM, EM_STREAM, SUBSPACE_STREAM = 0, 1, 2, 3, 4   # TRAIN_STREAM: common.icl's
EVAL_STREAMS = {"test": TEST_STREAM, "val": VAL_STREAM}
REFERENCES = {"dist_pm": "posterior_mean", "dist_argmin": "argmin", "dist_ols": "ols"}


def first_seen(sampler: StepSampler, steps: int, limit: int) -> torch.Tensor:
    """Indices of the first `limit` distinct items `sampler` yields over steps 0..steps-1, in the
    order first yielded (the sampler drops each epoch's last partial batch, so one epoch of steps
    need not cover the set)."""
    order, seen = [], set()
    for step in range(steps):
        for i in sampler(step).tolist():
            if i not in seen:
                seen.add(i)
                order.append(i)
                if len(order) == limit:
                    return torch.tensor(order)
        if len(seen) == sampler.n:
            break
    return torch.tensor(order, dtype=torch.long)


def test_prompts(mixture: MixtureOfRegressions, num_prompts: int, length: int, seed: int, split: str = "test"):
    """(xs, ys, component) from a stream of the run seed that training never draws from: the
    test prompts, or with split="val" the validation prompts that choose hyper-parameters."""
    if split not in EVAL_STREAMS:
        raise ValueError(f"split must be one of {sorted(EVAL_STREAMS)}, got '{split}'")
    gen = torch.Generator().manual_seed(stream_seed(seed, EVAL_STREAMS[split]))
    return mixture.sample(num_prompts, length, gen)


def scale_name(scale: float) -> str:
    """The metric suffix of a covariate scale: `x2`, `x0p5` (no '.', so `row.nmse_x0p5` parses
    as a claim)."""
    return "x" + f"{float(scale):g}".replace(".", "p")


def scaled_prompts(xs: torch.Tensor, ys: torch.Tensor, components: torch.Tensor, component: torch.Tensor,
                   scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The covariate-scale shift of the test prompts: the same prompts, components and noise
    with every x scaled by s, y recomputed: (s x, ⟨w_j, s x⟩ + σε) = (s x, y + (s − 1)⟨w_j, x⟩)
    (σε = y − ⟨w_j, x⟩ is the prompt's own noise). s = 1 returns the prompts unchanged, bit for bit."""
    if not scale > 0:
        raise ValueError(f"a covariate scale must be > 0, got {scale}")
    signal = torch.einsum("bkd,bd->bk", xs, components.to(xs.dtype)[component])
    return xs * scale, ys + (scale - 1) * signal


def all_predictions(xs: torch.Tensor, ys: torch.Tensor, components: torch.Tensor, noise_std: float,
                    model: torch.nn.Module | None = None, em_components: torch.Tensor | None = None,
                    subspace_components: torch.Tensor | None = None) -> dict:
    """{procedure: predictions (B, k)} on the same prompts; the transformer, EM and subspace rows
    only when given. EM and the subspace algorithm predict with the posterior mean under their
    estimated components. `ridge` (one isotropic Gaussian prior, variance 1) and `zero` are the
    rules that ignore the mixture: the controls of the transformer."""
    preds = {"posterior_mean": posterior_mean_predictions(xs, ys, components, noise_std),
             "argmin": argmin_predictions(xs, ys, components),
             "ridge": ridge_predictions(xs, ys, noise_std, prior_var=1.0),
             "ols": ols_predictions(xs, ys),
             "zero": zero_predictions(xs, ys)}
    if em_components is not None:
        preds["em"] = posterior_mean_predictions(xs, ys, em_components, noise_std)
    if subspace_components is not None:
        preds["subspace"] = posterior_mean_predictions(xs, ys, subspace_components, noise_std)
    if model is not None:
        preds = {"transformer": transformer_predictions(model, xs, ys), **preds}
    return preds


def shifted_metrics(xs: torch.Tensor, ys: torch.Tensor, component: torch.Tensor, components: torch.Tensor,
                    noise_std: float, scales, **fitted) -> dict[str, dict[str, float]]:
    """{procedure: {nmse_x<s>: value}} for every covariate scale s (`scaled_prompts`): every
    procedure of `all_predictions` (`fitted` = model, em_components, subspace_components) on the
    test prompts with x scaled by s. nmse as in `procedure_metrics` (positions 1..k−1, divided by
    d, not by s²: the zero predictor scores about s² + σ²/d)."""
    out: dict[str, dict[str, float]] = {}
    for scale in scales:
        sx, sy = scaled_prompts(xs, ys, components, component, scale)
        preds = all_predictions(sx, sy, components, noise_std, **fitted)
        for name, p in preds.items():   # torch's mean, as procedure_metrics: s = 1 is its nmse bit for bit
            curve = normalized_sq_error(p.double(), sy.double(), xs.shape[-1])
            out.setdefault(name, {})[f"nmse_{scale_name(scale)}"] = float(curve[1:].mean())
    return out


def nmse_curves(predictions: dict, ys: torch.Tensor, dim: int) -> dict[str, np.ndarray]:
    """{procedure: nmse at every position (k,)} (the plot's curves)."""
    return {name: normalized_sq_error(p.double(), ys.double(), dim).numpy() for name, p in predictions.items()}


def procedure_metrics(predictions: dict, ys: torch.Tensor, dim: int) -> dict[str, dict[str, float]]:
    """{procedure: {nmse, nmse_last, nmse_median, nmse_k<i> for i = d..k-1, gap_pm_max, dist_pm,
    dist_argmin, dist_ols}}. nmse and dist_* average positions 1..k-1 (position 0 has no
    examples); nmse_last is position k-1; nmse_k<i> is the nmse at position i, i.e. with i
    examples in context (the paper's curve at prompt lengths >= d); gap_pm_max = max over
    i = d..k-1 of nmse_k<i> minus the posterior mean's (how far above the Bayes curve the row gets
    at any length >= d; needs the posterior_mean row); nmse_median is the median over prompts of
    each prompt's error averaged over positions 1..k-1, a statistic that OLS's heavy tail near
    i = d (a near-singular prefix) does not dominate."""
    out = {}
    y = ys.double()
    bayes = normalized_sq_error(predictions["posterior_mean"].double(), y, dim) if "posterior_mean" in predictions else None
    for name, p in predictions.items():
        p = p.double()
        curve = normalized_sq_error(p, y, dim)
        per_prompt = (p - y)[:, 1:].square().mean(1) / dim                          # (B,)
        row = {"nmse": float(curve[1:].mean()), "nmse_last": float(curve[-1]),
               "nmse_median": float(per_prompt.quantile(0.5))}
        row.update({f"nmse_k{i}": float(curve[i]) for i in range(dim, len(curve))})
        if bayes is not None and len(curve) > dim:
            row["gap_pm_max"] = float((curve - bayes)[dim:].max())
        for key, ref in REFERENCES.items():
            if ref in predictions:
                row[key] = float(normalized_sq_error(p, predictions[ref].double(), dim)[1:].mean())
        out[name] = row
    return out
