"""The variance controller: keeps the variance VCAS adds a fixed fraction τ of the SGD noise.

Every F steps it takes M minibatches. For each: one forward, one exact backward, and M
backwards of that same graph with SampleA only (SampleW's variance is analytic, so those
passes only measure it). All variances are over the weights of the block linears, per linear
layer j (official sample_scheme.py):

    V_sgd,j = Σ_m ‖g_mj − ḡ_j‖² / (M − 1)                    variance of a minibatch gradient
    V_act,j = mean_{m,k} ‖ĝ_mkj − g_mj‖²                       variance SampleA adds
    V_w,j   = mean_{m,k} Σ_r (1/q_r − 1)‖∇Z_r‖²‖X_r‖²          variance SampleW would add

    s   ← s + α if Σ_j V_act,j > τ_act Σ_j V_sgd,j, else s − α      (clipped to [0, 1])
    ρ_l ← d·ρ_l + (1 − d)·max_{i ≤ l} p_i(s)    p_i(s): fewest samples holding an s share of
                                                 block i's output-gradient norm (mean over M)
    ν_j ← ν_j / β if V_w,j > τ_w V_sgd,j, else ν_j · β              (clipped to [ν_min, 1])
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from methods.vcas.sampling import SamplingState, keep_fraction


def sq_dists(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> torch.Tensor:
    """‖a_j − b_j‖² for every pair of tensors, as one vector."""
    return torch.stack([(x.double() - y.double()).pow(2).sum() for x, y in zip(a, b)])


class VarianceController:
    def __init__(self, state: SamplingState, act_var_tau: float = 0.025, w_var_tau: float = 0.025,
                 s_step: float = 0.01, w_ratio_mul: float = 0.95, m: int = 2, nu_min: float = 0.05,
                 sched_decay: float = 0.6):
        if m < 2:
            raise ValueError(f"the variance controller needs m >= 2 minibatches to estimate V_sgd, got m={m}")
        if not 0 < w_ratio_mul < 1:
            raise ValueError(f"w_ratio_mul must be in (0, 1), got {w_ratio_mul}")
        self.state, self.m = state, m
        self.act_var_tau, self.w_var_tau, self.s_step = act_var_tau, w_var_tau, s_step
        self.w_ratio_mul, self.nu_min, self.sched_decay = w_ratio_mul, nu_min, sched_decay
        self.s = 1.0

    def estimate(self, forward_loss: Callable, batches: Sequence, weights: Sequence[torch.Tensor]) -> dict:
        """Per-linear V_sgd, V_act, V_w and the exact per-block gradient norms of each batch."""
        st, m = self.state, self.m
        saved = (st.sample_act, st.sample_w, st.record, st.measure_w)
        st.reset_stats()
        exact, v_act = [], torch.zeros(len(weights), dtype=torch.float64)
        try:
            for batch in batches[:m]:
                loss = forward_loss(batch)   # one forward serves the exact and the M sampled backwards
                st.sample_act, st.sample_w, st.record, st.measure_w = False, False, True, False
                g = [t.detach() for t in torch.autograd.grad(loss, weights, retain_graph=True)]
                exact.append(g)
                st.sample_act, st.record, st.measure_w = True, False, True
                for k in range(m):
                    sampled = torch.autograd.grad(loss, weights, retain_graph=k < m - 1)
                    v_act += sq_dists(sampled, g).cpu()
        finally:
            st.sample_act, st.sample_w, st.record, st.measure_w = saved
        mean = [sum(gs) / m for gs in zip(*exact)]
        v_sgd = sum(sq_dists(g, mean).cpu() for g in exact) / (m - 1)
        est = {"v_sgd": v_sgd, "v_act": v_act / m**2, "v_w": torch.tensor(st.w_var, dtype=torch.float64) / m**2,
               "norms": {l: list(v) for l, v in st.norms.items()}}
        st.reset_stats()
        return est

    def update(self, est: dict) -> None:
        """One controller step from `estimate`'s output; writes ρ and ν into the state."""
        st = self.state
        too_noisy = float(est["v_act"].sum()) > self.act_var_tau * float(est["v_sgd"].sum())
        self.s = min(1.0, self.s + self.s_step) if too_noisy else max(0.0, self.s - self.s_step)
        target = [sum(keep_fraction(n, self.s) for n in est["norms"][l]) / len(est["norms"][l])
                  for l in range(st.num_blocks)]
        target = [max(target[: l + 1]) for l in range(st.num_blocks)]   # ρ never falls with depth
        d = self.sched_decay
        st.rho = [d * r + (1 - d) * t for r, t in zip(st.rho, target)]
        st.nu = [min(1.0, max(self.nu_min, nu / self.w_ratio_mul if vw > self.w_var_tau * vs else nu * self.w_ratio_mul))
                 for nu, vw, vs in zip(st.nu, est["v_w"].tolist(), est["v_sgd"].tolist())]

    def step(self, forward_loss: Callable, batches: Sequence, weights: Sequence[torch.Tensor]) -> dict:
        est = self.estimate(forward_loss, batches, weights)
        self.update(est)
        v_sgd = float(est["v_sgd"].sum())
        return {"s": self.s, "v_sgd": v_sgd, "v_act": float(est["v_act"].sum()), "v_w": float(est["v_w"].sum()),
                "act_ratio": float(est["v_act"].sum()) / max(v_sgd, 1e-30)}
