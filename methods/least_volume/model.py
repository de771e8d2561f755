"""Autoencoders with a free encoder e and a 1-Lipschitz decoder g (paper §2.2).

Every decoder layer is spectrally normalised (Linear: torch's spectral_norm; conv: the map at
its input shape, lipschitz.spectral_norm_conv) and followed by LeakyReLU(0.2), so the decoder
is 1-Lipschitz (a sigmoid output only shrinks it further: its slope is at most 1/4).
`lipschitz=False` gives the "nolip" ablation with the same layers unnormalised.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from methods.least_volume.lipschitz import spectral_norm_conv, spectral_norm_linear

SLOPE = 0.2  # the official LeakyReLU slope (src/model/layers.py)


def _activation(name: str | None) -> nn.Module:
    if name is None:
        return nn.Identity()
    if name == "sigmoid":
        return nn.Sigmoid()
    raise ValueError(f"out_activation must be 'sigmoid' or None, got {name!r}.")


def mlp(sizes, lipschitz: bool = False) -> nn.Sequential:
    """Linear + LeakyReLU between consecutive `sizes`, no activation after the last Linear
    (official `MLP` / `SNMLP`)."""
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        linear = nn.Linear(a, b)
        layers.append(spectral_norm_linear(linear) if lipschitz else linear)
        if i < len(sizes) - 2:
            layers.append(nn.LeakyReLU(SLOPE))
    return nn.Sequential(*layers)


class Autoencoder(nn.Module):
    """encode: x -> z (n, m); decode: z -> x̂ = out_activation(decoder(z)); forward -> (x̂, z)."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module, out_activation: str | None = "sigmoid"):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.out = _activation(out_activation)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.out(self.decoder(z))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.encode(x)
        return self.decode(z), z


class LeastVolumeAE(Autoencoder):
    """MLP autoencoder on flat inputs (n, in_dim): encoder in_dim -> *hidden -> latent_dim,
    decoder mirrored (latent_dim -> *reversed(hidden) -> in_dim), spectrally normalised when
    `lipschitz`. hidden=() gives a linear autoencoder."""

    def __init__(self, in_dim: int, latent_dim: int, hidden=(256, 256), lipschitz: bool = True,
                 out_activation: str | None = "sigmoid"):
        hidden = tuple(hidden)
        super().__init__(mlp((in_dim, *hidden, latent_dim)),
                         mlp((latent_dim, *reversed(hidden), in_dim), lipschitz=lipschitz), out_activation)


class ConvEncoder(nn.Module):
    """(n, C, S, S) -> (n, m): [Conv k4 s2 p1 + LeakyReLU] per channel count, flatten, Linear
    (official `DCDiscriminator` with crt_layers=[])."""

    def __init__(self, in_channels: int, latent_dim: int, size: int = 32, channels=(32, 64, 128, 256)):
        super().__init__()
        if size % 2 ** len(channels):
            raise ValueError(f"size {size} must be divisible by 2**{len(channels)} (one halving per conv).")
        layers = []
        for a, b in zip((in_channels, *channels[:-1]), channels):
            layers += [nn.Conv2d(a, b, 4, 2, 1), nn.LeakyReLU(SLOPE)]
        side = size // 2 ** len(channels)
        self.net = nn.Sequential(*layers, nn.Flatten(), nn.Linear(channels[-1] * side * side, latent_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ConvDecoder(nn.Module):
    """(n, m) -> (n, C_out, S, S) before the output activation: Linear to (channels[0], s, s)
    with s = S / 2^len(channels), then [ConvTranspose k4 s2 p1 + LeakyReLU] between consecutive
    channels and a last ConvTranspose to C_out (official `TrueSNDCGenerator` with
    dense_layers=[]: no activation between the Linear and the first deconvolution)."""

    def __init__(self, latent_dim: int, out_channels: int, size: int = 32, channels=(128, 64, 32),
                 lipschitz: bool = True):
        super().__init__()
        if size % 2 ** len(channels):
            raise ValueError(f"size {size} must be divisible by 2**{len(channels)} (one doubling per deconv).")
        self.side = size // 2 ** len(channels)
        self.channels = tuple(channels)
        self.dense = mlp((latent_dim, channels[0] * self.side ** 2), lipschitz=lipschitz)
        layers = []
        outs = (*channels[1:], out_channels)
        for i, (a, b) in enumerate(zip(channels, outs)):
            deconv = nn.ConvTranspose2d(a, b, 4, 2, 1)
            side = self.side * 2 ** i  # the input shape at which this layer's map is normalised
            layers.append(spectral_norm_conv(deconv, (side, side)) if lipschitz else deconv)
            if i < len(outs) - 1:
                layers.append(nn.LeakyReLU(SLOPE))
        self.deconv = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.dense(z).view(-1, self.channels[0], self.side, self.side)  # (n, C0, s, s)
        return self.deconv(h)


class ConvLeastVolumeAE(Autoencoder):
    """The paper's image autoencoder (official configs: MNIST channels 32-64-128-256 / 128-64-32,
    latent 128; CIFAR-10 128-256-512-1024 / 512-256-128, latent 2048)."""

    def __init__(self, in_channels: int = 1, latent_dim: int = 128, size: int = 32,
                 encoder_channels=(32, 64, 128, 256), decoder_channels=(128, 64, 32), lipschitz: bool = True,
                 out_activation: str | None = "sigmoid"):
        super().__init__(ConvEncoder(in_channels, latent_dim, size, encoder_channels),
                         ConvDecoder(latent_dim, in_channels, size, decoder_channels, lipschitz), out_activation)
