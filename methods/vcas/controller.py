"""The variance controller: keeps the variance VCAS adds a fixed fraction τ of the SGD noise.

Every `every` steps it takes M minibatches and, for each, one exact backward pass and M
passes with SampleA only (SampleW's variance is analytic, so those passes only measure it):

    V_sgd  = Σ_m ‖g_m − ḡ‖² / (M − 1)              variance of a minibatch gradient
    V_act  = mean_{m,k} ‖ĝ_mk − g_m‖²               variance SampleA adds (g_m is known)
    V_w,l  = mean_{m,k} Σ_i (1/q_i − 1)‖∇Z_i‖²‖X_i‖²  variance SampleW would add in block l

    s   ← clip(s + α·sign(V_act − τ_act·V_sgd), 0, 1)
    ρ_l = max_{j ≤ l} p_j(s)        p_j(s): fewest samples holding an s share of block j's norm
    ν_l ← clip(ν_l · β^(−sign(V_w,l − τ_w·V_sgd)), ν_min, 1)   (β < 1: too much variance → keep more)
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from methods.vcas.sampling import SamplingState, keep_fraction


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def sq_dist(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    return float(sum((x.float() - y.float()).pow(2).sum() for x, y in zip(a, b)))


class VarianceController:
    def __init__(self, state: SamplingState, tau_act: float = 0.025, tau_w: float = 0.025,
                 alpha: float = 0.01, beta: float = 0.95, m: int = 2, nu_min: float = 0.05):
        if m < 2:
            raise ValueError("the variance controller needs m >= 2 minibatches to estimate V_sgd")
        self.state, self.m = state, m
        self.tau_act, self.tau_w, self.alpha, self.beta, self.nu_min = tau_act, tau_w, alpha, beta, nu_min
        self.s = 1.0

    def _grads(self, loss_fn, batch, params, act: bool) -> list[torch.Tensor]:
        st = self.state
        # the exact passes keep plain nn.Linear gradients; the SampleA passes also measure SampleW
        st.sample_act, st.sample_w, st.record, st.measure_w = act, False, True, act
        return [g.detach() for g in torch.autograd.grad(loss_fn(batch), params)]

    def estimate(self, loss_fn: Callable, batches: Sequence, params: Sequence[torch.Tensor]) -> dict:
        """The three variances (summed over all parameters) and the exact per-block norms."""
        st, m = self.state, self.m
        saved = (st.sample_act, st.sample_w, st.record, st.measure_w)
        st.reset_stats()
        exact, v_act = [], 0.0
        for batch in batches[:m]:
            exact.append(self._grads(loss_fn, batch, params, act=False))
        norms = {l: torch.cat(v) for l, v in st.norms.items()}   # exact passes only
        st.reset_stats()
        for batch, g in zip(batches[:m], exact):
            for _ in range(m):
                v_act += sq_dist(self._grads(loss_fn, batch, params, act=True), g)
        mean = [sum(gs) / m for gs in zip(*exact)]
        v_sgd = sum(sq_dist(g, mean) for g in exact) / (m - 1)
        w_var = [v / m**2 for v in st.w_var]
        st.sample_act, st.sample_w, st.record, st.measure_w = saved
        st.reset_stats()
        return {"v_sgd": v_sgd, "v_act": v_act / m**2, "v_w": w_var, "norms": norms}

    def update(self, est: dict) -> None:
        """One controller step from `estimate`'s output; writes ρ and ν into the state."""
        st, v_sgd = self.state, est["v_sgd"]
        self.s = min(1.0, max(0.0, self.s + self.alpha * _sign(est["v_act"] - self.tau_act * v_sgd)))
        fractions = [keep_fraction(est["norms"][l], self.s) for l in range(st.num_blocks)]
        st.rho = [max(fractions[: l + 1]) for l in range(st.num_blocks)]
        st.nu = [min(1.0, max(self.nu_min, nu * self.beta ** -_sign(v - self.tau_w * v_sgd)))
                 for nu, v in zip(st.nu, est["v_w"])]

    def step(self, loss_fn: Callable, batches: Sequence, params: Sequence[torch.Tensor]) -> dict:
        est = self.estimate(loss_fn, batches, params)
        self.update(est)
        return {"s": self.s, "v_sgd": est["v_sgd"], "v_act": est["v_act"], "v_w": sum(est["v_w"]),
                "act_ratio": est["v_act"] / max(est["v_sgd"], 1e-30)}
