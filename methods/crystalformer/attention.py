"""Infinitely connected attention over a periodic crystal (and its cutoff-local baseline).

For atoms i, j of the unit cell and lattice translations n (positions p, lattice rows L):
    r_ijn = ‖p_j + nL − p_i‖
    α_ij  = log Σ_n exp(−r²_ijn / 2σ_i²)                 Gaussian distance decay over all images
    β_ij  = Σ_n w_ijn ψ(r_ijn),  w_ijn = softmax_n(−r²_ijn / 2σ_i²),  ψ(r) = W_E b(r)
    y_i   = Σ_j softmax_j(q_iᵀk_j/√d + α_ij) (v_j + β_ij)
    σ_i⁻² = r₀⁻² ρ((q_iᵀw − m)/s),  ρ(x) = (1 − b)·ELU(a x/(1 − b)) + 1

Both sums over n fold into one softmax over *images*: softmax_j(q·k + α_ij)·w_ijn =
exp(q_iᵀk_j/√d − r²_ijn/2σ_i²) / Σ_{j',n'}(same), so with p_ijn that image softmax,
    y_i = Σ_{j,n} p_ijn (v_j + ψ(r_ijn)).
The model therefore works on a list of images ("edges" i ← (j, n)) and never builds the
(N, N, K) tensor: attention is a softmax grouped by the query atom, and ψ is aggregated as
Σ p_ijn b(r_ijn) before W_E, in chunks of images recomputed in the backward. The cutoff baseline is the same code with a learned distance
bias instead of the Gaussian, and only images within its radius.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from common.kernels import resolve_impl
from common.kernels.periodic_attention import periodic_attention
from common.kernels.periodic_attention.reference import group_softmax, rbf

MODES = ("full", "simplified", "cutoff")


def shifted_elu(x: torch.Tensor, a: float, b: float) -> torch.Tensor:
    return (1 - b) * F.elu(a * x / (1 - b)) + 1


class PeriodicAttention(nn.Module):
    def __init__(self, dim: int, heads: int, mode: str = "full", n_rbf: int = 64, r_max: float = 14.0,
                 r0: float = 1.4, a: float = 0.1, b: float = 0.5, chunk: int = 32768, kernels: str = "reference"):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got '{mode}'")
        self.dim, self.heads, self.dk, self.mode = dim, heads, dim // heads, mode
        self.n_rbf, self.r_max, self.r0, self.a, self.b, self.chunk = n_rbf, r_max, r0, a, b, chunk
        self.kernels = kernels   # hardware.kernels: the fused Triton attention where it resolves to Triton
        self.q, self.k, self.v = (nn.Linear(dim, dim) for _ in range(3))
        self.out = nn.Linear(dim, dim)
        if mode != "cutoff":
            self.w = nn.Parameter(torch.randn(heads, self.dk) / math.sqrt(self.dk))
            # m, s: one mean and one std of q_iᵀw over all atoms and heads, saved by the first
            # training batch (official gauss_scale, indexed_lattice_multi_head_attention_cuda.py:658-673)
            self.register_buffer("m", torch.zeros(()))
            self.register_buffer("s", torch.ones(()))
            self.register_buffer("calibrated", torch.zeros((), dtype=torch.bool))
            # a host-side copy of `calibrated`: reading the buffer on every forward would be a device
            # sync per layer on a GPU; it is read once (then kept), and again after a state_dict load
            self._calibrated_host = False
        if mode != "simplified":
            self.W_E = nn.Parameter(self.init_W_E(heads, n_rbf, self.dk))          # ψ, one per head
        if mode == "cutoff":
            self.phi = nn.Parameter(torch.zeros(heads, n_rbf))                    # distance bias

    @staticmethod
    def init_W_E(heads: int, n_rbf: int, dk: int) -> torch.Tensor:
        """Official init (indexed_lattice_multi_head_attention.py:1637-1647): Xavier-uniform with
        gain n_rbf^-½ on the (heads·dk, n_rbf) matrix, i.e. fan_in n_rbf, fan_out heads·dk.
        Not rescaled by T-Fixup (pe_dist_proj is commented out of fixup_initialization)."""
        W = nn.init.xavier_uniform_(torch.empty(heads * dk, n_rbf), gain=n_rbf**-0.5)
        return W.view(heads, dk, n_rbf).transpose(1, 2).contiguous()             # (H, R, dk)

    def inv_sigma2(self, q: torch.Tensor) -> torch.Tensor:
        """σ_i⁻² per atom and head, (atoms, H). Until m, s are saved, the batch's own (detached)
        statistics standardise q_iᵀw, in eval too, as the official code does before its first
        training step; the first training batch saves them."""
        x = torch.einsum("ahd,hd->ah", q, self.w)
        m, s = self.m, self.s
        if not self._calibrated_host:
            self._calibrated_host = bool(self.calibrated)
        if not self._calibrated_host:
            m, s = x.detach().mean(), x.detach().std().clamp_min(1e-6)
            if self.training:
                self.m.copy_(m)
                self.s.copy_(s)
                self.calibrated.fill_(True)
                self._calibrated_host = True
        return shifted_elu((x - m) / s, self.a, self.b) / self.r0**2

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._calibrated_host = False     # the loaded `calibrated` is read on the next forward

    def forward(self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, r2: torch.Tensor) -> torch.Tensor:
        """x (atoms, D) for all real atoms of the batch; images as edges: query atom `src`,
        key atom `dst`, squared distance `r2` (E,). Returns (atoms, D)."""
        A = x.shape[0]
        q, k, v = (f(x).view(A, self.heads, self.dk) for f in (self.q, self.k, self.v))
        if self.mode != "cutoff" and resolve_impl(self.kernels, x.device) == "triton":
            # the same softmax over images, fused: no (E, H, d) tensor (common/kernels/periodic_attention)
            y = periodic_attention(q, k, v, self.inv_sigma2(q), src, dst, r2, getattr(self, "W_E", None),
                                   r_max=self.r_max, impl="triton")
            return self.out(y.reshape(A, self.dim))
        score = (q[src] * k[dst]).sum(-1) / math.sqrt(self.dk)                   # (E, H)
        if self.mode == "cutoff":
            score = score + rbf(r2.sqrt(), self.n_rbf, self.r_max) @ self.phi.t()  # learned distance bias
        else:
            score = score - 0.5 * r2[:, None] * self.inv_sigma2(q)[src]
        p = group_softmax(score, src, A)                                         # (E, H)
        y = x.new_zeros(A, self.heads, self.dk).index_add(0, src, p[..., None] * v[dst])
        if self.mode != "simplified":
            y = y + torch.einsum("ahr,hrd->ahd", self._radial_sum(p, r2, src, A), self.W_E)
        return self.out(y.reshape(A, self.dim))

    def _radial_sum(self, p: torch.Tensor, r2: torch.Tensor, src: torch.Tensor, atoms: int) -> torch.Tensor:
        """Σ_{images of i} p_ijn b(r_ijn), (atoms, H, basis). The (images, H, basis) product is
        built `chunk` images at a time and recomputed in the backward, so memory stays bounded."""
        def part(p_c, r2_c, src_c):
            prod = p_c[..., None] * rbf(r2_c.sqrt(), self.n_rbf, self.r_max)[:, None]
            return p_c.new_zeros(atoms, self.heads, self.n_rbf).index_add(0, src_c, prod)

        if len(src) <= self.chunk:                 # small enough to keep for the backward as is
            return part(p, r2, src)
        total = 0
        for s in range(0, len(src), self.chunk):
            args = (p[s:s + self.chunk], r2[s:s + self.chunk], src[s:s + self.chunk])
            total = total + (checkpoint(part, *args, use_reentrant=False) if torch.is_grad_enabled() else part(*args))
        return total
