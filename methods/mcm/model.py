"""MCM's mask generator and masked autoencoder (Yin et al., ICLR 2024), plus the two fixed
masking schemes of the ablations (none: a plain autoencoder; random binary masks)."""
from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn


class MaskGenerator(nn.Module):
    """K independent bias-free MLPs G_k: d → d → ... → d (ReLU between layers), run as one
    matmul (first layer) and one batched matmul (each later layer) for all K. Weights are stored like K stacked nn.Linear weights, (K, out, in),
    and initialised as nn.Linear does (U(±1/√in)); the official code loops over K nn.Sequential."""

    def __init__(self, num_features: int, num_masks: int = 15, num_layers: int = 3):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"mask_layers must be at least 1, got {num_layers}.")
        self.num_masks = num_masks
        bound = 1 / math.sqrt(num_features)
        self.weights = nn.ParameterList(
            nn.Parameter(torch.empty(num_masks, num_features, num_features).uniform_(-bound, bound))
            for _ in range(num_layers))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, d) -> G_k(x) for every k, (B, K, d). The first layer reads the same x for every
        k, so it is one (B, d) x (d, K·d) matmul; the later layers are one batched matmul over k
        in the (K, B, d) layout (no copy between layers)."""
        first = self.weights[0]                                          # (K, o, i)
        k, o, _ = first.shape
        h = (x @ first.reshape(k * o, -1).t()).view(len(x), k, o).transpose(0, 1)   # (K, B, o)
        for w in self.weights[1:]:
            h = torch.bmm(torch.relu(h), w.transpose(1, 2))              # (K, B, i) x (K, i, o)
        return h.transpose(0, 1)                                         # (B, K, d), a view

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(masks M_k = sigmoid(G_k(x)) ∈ (0, 1), logits), both (B, K, d)."""
        logits = self.logits(x)
        return torch.sigmoid(logits), logits


class FixedMasks(nn.Module):
    """Masks that do not depend on x: all ones (K = 1, a plain autoencoder) or K random binary
    masks, each hiding round(ratio · d) features, drawn once from `generator`."""

    def __init__(self, num_features: int, num_masks: int, ratio: float = 0.0, generator: torch.Generator | None = None):
        super().__init__()
        if not 0 <= ratio < 1:
            raise ValueError(f"mask ratio must be in [0, 1), got {ratio}.")
        hidden = round(ratio * num_features)
        order = torch.stack([torch.randperm(num_features, generator=generator) for _ in range(num_masks)])
        self.register_buffer("masks", (order >= hidden).float())   # (K, d), d − hidden ones per row
        self.num_masks = num_masks

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return self.masks.expand(x.shape[0], -1, -1), None


def mlp(dims: list[int]) -> nn.Sequential:
    """Bias-free Linear layers with LeakyReLU(0.2) between them (none after the last)."""
    layers = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(a, b, bias=False))
        if i < len(dims) - 2:
            layers.append(nn.LeakyReLU(0.2))
    return nn.Sequential(*layers)


class MCM(nn.Module):
    """x̃_k = x ⊙ M_k, x̂_k = D(E(x̃_k)) with one shared encoder d → h → ... → z and decoder
    z → h → ... → d. masking: 'learned' (the paper), 'none' (plain AE, K must be 1) or
    'random' (K fixed random binary masks hiding `mask_ratio` of the features)."""

    def __init__(self, num_features: int, num_masks: int = 15, hidden_dim: int = 256, latent_dim: int = 128,
                 encoder_layers: int = 3, decoder_layers: int = 3, mask_layers: int = 3,
                 masking: Literal["learned", "none", "random"] = "learned", mask_ratio: float = 0.5, generator: torch.Generator | None = None):
        super().__init__()
        if num_masks < 1:
            raise ValueError(f"num_masks must be at least 1, got {num_masks}.")
        if masking == "learned":
            self.mask_generator = MaskGenerator(num_features, num_masks, mask_layers)
        elif masking == "none":
            if num_masks != 1:
                raise ValueError(f"masking='none' is a plain autoencoder with one copy; num_masks must be 1, got {num_masks}.")
            self.mask_generator = FixedMasks(num_features, 1)
        elif masking == "random":
            self.mask_generator = FixedMasks(num_features, num_masks, mask_ratio, generator)
        else:
            raise ValueError(f"masking must be 'learned', 'none' or 'random', got '{masking}'.")
        self.num_features, self.num_masks, self.masking = num_features, num_masks, masking
        self.encoder = mlp([num_features] + [hidden_dim] * (encoder_layers - 1) + [latent_dim])
        self.decoder = mlp([latent_dim] + [hidden_dim] * (decoder_layers - 1) + [num_features])

    def forward(self, x: torch.Tensor, return_logits: bool = False):
        """x (B, d) -> (x̂ (B, K, d), masks (B, K, d)) [, mask logits (B, K, d) or None]."""
        if x.dim() != 2 or x.shape[1] != self.num_features:
            raise ValueError(f"MCM expects input of shape (batch, {self.num_features}), got {tuple(x.shape)}.")
        masks, logits = self.mask_generator(x)
        x_hat = self.decoder(self.encoder(x.unsqueeze(1) * masks))   # nn.Linear maps the last axis: b k d -> b k d
        return (x_hat, masks, logits) if return_logits else (x_hat, masks)
