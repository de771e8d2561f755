"""Crystalformer: species embedding, blocks of periodic attention + feed-forward without
LayerNorm (T-Fixup initialisation), mean pooling and a two-layer head.

Crystals come as a padded batch (`collate`): atomic numbers z (B, N), Cartesian positions
(B, N, 3), lattice rows (B, 3, 3), atom mask (B, N).
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from methods.crystalformer.attention import PeriodicAttention


def collate(crystals: list[dict], device="cpu", reach: float | None = None) -> dict[str, torch.Tensor]:
    """Pad a list of {z, pos, lattice, target} crystals into batch tensors (float64 geometry).
    With `reach`, also the image edges, computed once per crystal and cached in its dict
    (geometry is fixed, so training does not recompute it every step)."""
    B, N = len(crystals), max(len(c["z"]) for c in crystals)
    z = torch.zeros(B, N, dtype=torch.long)
    pos = torch.zeros(B, N, 3, dtype=torch.float64)
    mask = torch.zeros(B, N, dtype=torch.bool)
    for b, c in enumerate(crystals):
        n = len(c["z"])
        z[b, :n], pos[b, :n], mask[b, :n] = torch.as_tensor(c["z"]), torch.as_tensor(c["pos"]), True
    lattice = torch.as_tensor(np.stack([c["lattice"] for c in crystals]), dtype=torch.float64)
    target = torch.tensor([float(c.get("target", float("nan"))) for c in crystals], dtype=torch.float64)
    out = dict(z=z, pos=pos, lattice=lattice, mask=mask, target=target)
    if reach is not None:
        parts, offset = [], 0
        for g, c in enumerate(crystals):
            key = f"edges@{reach:.6g}"
            if key not in c:
                one = {k: v[:1] for k, v in collate([c]).items()}
                c[key] = {k: v for k, v in image_edges(one, reach).items() if k != "graph"}
            e = c[key]
            parts.append((e["src"] + offset, e["dst"] + offset, e["r2"]))
            offset += len(c["z"])
        out["src"], out["dst"], out["r2"] = (torch.cat(x) for x in zip(*parts))
        out["graph"] = torch.arange(B)[:, None].expand_as(mask)[mask]
        out["reach"] = torch.tensor(reach, dtype=torch.float64)
    return {k: v.to(device) for k, v in out.items()}


def translations(pos: torch.Tensor, lattice: torch.Tensor, mask: torch.Tensor, reach: float):
    """Integer translations n that reach every image within `reach` Å of any atom: per axis
    ceil(reach / plane spacing + the atoms' fractional spread). Returns the (K, 3) grid."""
    vol = torch.linalg.det(lattice).abs()                                       # (B,)
    a, b, c = lattice.unbind(1)
    faces = torch.stack([torch.linalg.cross(b, c), torch.linalg.cross(c, a), torch.linalg.cross(a, b)], 1)
    spacing = vol[:, None] / faces.norm(dim=-1)                                 # (B, 3)
    frac = pos @ torch.linalg.inv(lattice)                                      # (B, N, 3)
    big = torch.finfo(frac.dtype).max
    spread = frac.masked_fill(~mask[..., None], -big).amax(1) - frac.masked_fill(~mask[..., None], big).amin(1)
    R = torch.ceil(reach / spacing + spread).long().amax(0).tolist()
    return torch.cartesian_prod(*[torch.arange(-r, r + 1, device=pos.device) for r in R])


def image_edges(batch: dict, reach: float) -> dict[str, torch.Tensor]:
    """Every image (j, n) within `reach` Å of every atom i, as flat atom indices over the
    batch's real atoms: src (query i), dst (key j), r2 = ‖p_j + nL − p_i‖², graph id."""
    pos, lattice, mask = batch["pos"], batch["lattice"], batch["mask"]
    grid = translations(pos, lattice, mask, reach)
    shifts = grid.to(lattice.dtype) @ lattice                                   # (B, K, 3)
    rel = pos[:, None, :, :] - pos[:, :, None, :]                               # (B, i, j, 3): p_j − p_i
    r2 = ((rel[:, :, :, None, :] + shifts[:, None, None]) ** 2).sum(-1)         # (B, N, N, K)
    keep = (r2 <= reach**2) & mask[:, :, None, None] & mask[:, None, :, None]
    b, i, j, _ = keep.nonzero(as_tuple=True)
    atom = torch.full(mask.shape, -1, dtype=torch.long, device=pos.device)
    atom[mask] = torch.arange(int(mask.sum()), device=pos.device)
    graph = torch.arange(len(mask), device=pos.device)[:, None].expand_as(mask)[mask]
    return {"src": atom[b, i], "dst": atom[b, j], "r2": r2[keep], "graph": graph}


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int, attn_kwargs: dict):
        super().__init__()
        self.attn = PeriodicAttention(dim, heads, **attn_kwargs)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn), nn.ReLU(), nn.Linear(ffn, dim))

    def forward(self, x, src, dst, r2):
        x = x + self.attn(x, src, dst, r2)
        return x + self.ffn(x)


class Crystalformer(nn.Module):
    """mode: full | simplified (ψ = 0) | cutoff (attention only to images within `cutoff` Å)."""

    def __init__(self, dim: int = 128, depth: int = 4, heads: int = 8, ffn: int = 512, mode: str = "full",
                 n_rbf: int = 64, r_max: float = 14.0, r0: float = 1.4, a: float = 0.1, b: float = 0.5,
                 cover_sigmas: float = 3.5, cutoff: float = 5.0, kernels: str = "reference"):
        super().__init__()
        self.mode, self.cover, self.cutoff = mode, cover_sigmas, cutoff
        self.sigma_max = r0 / math.sqrt(b)     # ρ ≥ b, so σ ≤ r₀/√b: the widest Gaussian
        self.embed = nn.Embedding(119, dim)
        kw = dict(mode=mode, n_rbf=n_rbf, r_max=r_max, r0=r0, a=a, b=b, kernels=kernels)
        self.blocks = nn.ModuleList(Block(dim, heads, ffn, kw) for _ in range(depth))
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 1))
        self.register_buffer("y_mean", torch.zeros(()))
        self.register_buffer("y_std", torch.ones(()))
        self._t_fixup(depth, dim)

    def _t_fixup(self, depth: int, dim: int) -> None:
        """T-Fixup (Huang et al. 2020) for an encoder without LayerNorm: embeddings
        N(0, d^-1/2 (9N)^-1/4) (official models/latticeformer.py:134-137), Xavier elsewhere,
        value/output/feed-forward weights scaled by 0.67 N^-1/4."""
        nn.init.normal_(self.embed.weight, 0, dim**-0.5 * (9 * depth) ** -0.25)
        scale = 0.67 * depth**-0.25
        for blk in self.blocks:
            for lin in (blk.attn.q, blk.attn.k, blk.attn.v, blk.attn.out, blk.ffn[0], blk.ffn[2]):
                nn.init.xavier_uniform_(lin.weight)
                nn.init.zeros_(lin.bias)
            for lin in (blk.attn.v, blk.attn.out, blk.ffn[0], blk.ffn[2]):
                lin.weight.data.mul_(scale)

    @property
    def reach(self) -> float:
        """Images kept: within the cutoff, or within `cover_sigmas` of the widest Gaussian."""
        return self.cutoff if self.mode == "cutoff" else self.cover * self.sigma_max

    def forward(self, batch: dict) -> torch.Tensor:
        dtype = self.embed.weight.dtype
        cached = "reach" in batch and abs(float(batch["reach"]) - self.reach) < 1e-9
        e = batch if cached else image_edges(batch, self.reach)
        r2 = e["r2"].to(dtype)
        x = self.embed(batch["z"][batch["mask"]])                               # (atoms, D)
        for blk in self.blocks:
            x = blk(x, e["src"], e["dst"], r2)
        n = len(batch["mask"])
        pooled = x.new_zeros(n, x.shape[1]).index_add(0, e["graph"], x) / batch["mask"].sum(1, keepdim=True)
        return self.head(pooled).squeeze(-1) * self.y_std + self.y_mean

    def training_step(self, batch):
        pred = self(batch)
        target = batch["target"].to(pred.dtype)
        loss = (pred - target).abs().mean() / self.y_std                        # L1, in units of the target std
        return loss, {"mae": (pred - target).abs().mean().detach()}

