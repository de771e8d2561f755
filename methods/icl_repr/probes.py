"""Linear probes of the transformer's hidden states (Guo et al. §5): does a layer hold Φ*(x_i), or
the Bayes prediction at position i? A ridge fit on half the probe prompts, R² on the other half."""
from __future__ import annotations

import numpy as np
import torch

from common.icl.prompts import check_prompts


def probe_r2(train_h, train_t, test_h, test_t, alpha: float = 1e-3) -> float:
    """scikit-learn's Ridge(alpha, fit_intercept=True) fitted on (train_h (n, p), train_t (n,) or (n, q)),
    scored by r2_score(test_t, prediction, multioutput="variance_weighted") on the test pair, written
    out in float64: centre on the training means, solve (HᵀH + αI) B = HᵀT, intercept t̄ − h̄B;
    R² = 1 − Σ_j SS_res,j / Σ_j SS_tot,j (SS_tot about the test targets' mean)."""
    if not alpha >= 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    h, t, hv, tv = (np.asarray(torch.as_tensor(a).double().cpu() if isinstance(a, torch.Tensor) else a, dtype=np.float64)
                    for a in (train_h, train_t, test_h, test_t))
    t, tv = t.reshape(len(t), -1), tv.reshape(len(tv), -1)
    if h.ndim != 2 or hv.ndim != 2 or h.shape[1] != hv.shape[1] or len(h) != len(t) or len(hv) != len(tv) \
            or t.shape[1] != tv.shape[1]:
        raise ValueError(f"probe shapes do not match: train {h.shape} -> {t.shape}, test {hv.shape} -> {tv.shape}")
    h_mean, t_mean = h.mean(0), t.mean(0)
    hc, tc = h - h_mean, t - t_mean
    coef = np.linalg.solve(hc.T @ hc + alpha * np.eye(h.shape[1]), hc.T @ tc)       # (p, q)
    pred = (hv - h_mean) @ coef + t_mean
    ss_res = ((tv - pred) ** 2).sum()
    ss_tot = ((tv - tv.mean(0)) ** 2).sum()
    return float(1.0 - ss_res / ss_tot)


def x_token_rows(states: torch.Tensor, start: int) -> torch.Tensor:
    """The x-token states (index 2i) at positions i >= start, stacked: (B · (k − start), width)."""
    return states[:, 2 * start::2].reshape(-1, states.shape[-1])


def y_token_rows(states: torch.Tensor, start: int) -> torch.Tensor:
    """The y-token states (index 2i + 1) at positions i >= start: (B · (k − start), width)."""
    return states[:, 2 * start + 1::2].reshape(-1, states.shape[-1])


@torch.no_grad()
def probe_curves(model, xs: torch.Tensor, ys: torch.Tensor, phi: torch.Tensor, bayes: torch.Tensor,
                 alpha: float = 1e-3, wrong_phi: torch.Tensor | None = None) -> dict[str, list[float]]:
    """Probe R² at every state 0..depth of a model (its `hidden_states`) on probe prompts xs (B, k, d),
    ys (B, k), positions i >= k/2, fitted on the first half of the prompts and scored on the second:
    phi_x: Φ*(x_i) (phi (B, k, D)) from the x_i token; bayes_x: the Bayes prediction (bayes (B, k))
    from the x_i token; phi_y: Φ*(x_i) from the y_i token; with `wrong_phi` (B, k, D'), also wphi_x:
    a wrong representation Φ'(x_i) (another seed's Φ*, the probes' control) from the x_i token."""
    check_prompts(xs, ys)
    model.eval()
    device = next(model.parameters()).device
    states = [s.cpu() for s in model.hidden_states(xs.to(device), ys.to(device))]
    k, half = xs.shape[1], len(xs) // 2
    if half < 1 or k < 2:
        raise ValueError(f"probes need at least 2 prompts of length >= 2, got {tuple(xs.shape)}")
    start = k // 2
    n = half * (k - start)                       # rows of the first half of the prompts
    phi_t, bayes_t = phi[:, start:].reshape(-1, phi.shape[-1]), bayes[:, start:].reshape(-1)
    out = {"phi_x": [], "bayes_x": [], "phi_y": []}
    if wrong_phi is not None:
        wphi_t = wrong_phi[:, start:].reshape(-1, wrong_phi.shape[-1])
        out["wphi_x"] = []
    for s in states:
        xr, yr = x_token_rows(s, start), y_token_rows(s, start)
        out["phi_x"].append(probe_r2(xr[:n], phi_t[:n], xr[n:], phi_t[n:], alpha))
        out["bayes_x"].append(probe_r2(xr[:n], bayes_t[:n], xr[n:], bayes_t[n:], alpha))
        out["phi_y"].append(probe_r2(yr[:n], phi_t[:n], yr[n:], phi_t[n:], alpha))
        if wrong_phi is not None:
            out["wphi_x"].append(probe_r2(xr[:n], wphi_t[:n], xr[n:], wphi_t[n:], alpha))
    return out


def probe_metrics(curves: dict[str, list[float]]) -> dict[str, float]:
    """The table's probe metrics from `probe_curves` (states 0..depth): phi_r2_emb: state 0 (read-in
    + positions); phi_r2_low, bayes_r2_low: the best of blocks 1..depth/2; bayes_r2_top: the last
    state (after the final LayerNorm); phi_y_r2: the best of blocks 1..depth; the layer profile,
    read before the last block (whose output is linear in ŷ through the read-out): bayes_rise and
    phi_rise, the R² of the Bayes prediction and of Φ*(x) at block depth − 1 minus at block 1."""
    depth = len(curves["phi_x"]) - 1
    if depth < 1:
        raise ValueError("probe metrics need at least one block")
    low = slice(1, max(depth // 2, 1) + 1)
    below_top = max(depth - 1, 1)
    return {"phi_r2_emb": curves["phi_x"][0], "phi_r2_low": max(curves["phi_x"][low]),
            "bayes_r2_low": max(curves["bayes_x"][low]), "bayes_r2_top": curves["bayes_x"][depth],
            "phi_y_r2": max(curves["phi_y"][1:]),
            "bayes_rise": curves["bayes_x"][below_top] - curves["bayes_x"][1],
            "phi_rise": curves["phi_x"][below_top] - curves["phi_x"][1]}


def low_max(curve: list[float]) -> float:
    """The best R² of blocks 1..depth/2 of a per-state curve (states 0..depth)."""
    depth = len(curve) - 1
    if depth < 1:
        raise ValueError("probe metrics need at least one block")
    return max(curve[1:max(depth // 2, 1) + 1])
