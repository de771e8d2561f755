"""1-Lipschitz layers: spectral normalisation of a convolution's linear map (paper §2.2; the
official `spectral_norm_conv`, src/model/utils/parametrization.py).

`torch.nn.utils.parametrizations.spectral_norm` divides a conv kernel by the top singular
value of the kernel reshaped to (C_out, C_in·k·k); that is not the norm of the map the layer
applies to an image, so the layer need not be 1-Lipschitz. Here the power method runs on the
layer's own linear map A (the convolution without its bias) at a fixed input shape:
u ← A v / ‖A v‖, v ← Aᵀ u / ‖Aᵀ u‖, σ = ⟨u, A v⟩, kernel ← kernel / σ.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize

_CONV = {nn.Conv1d: F.conv1d, nn.Conv2d: F.conv2d, nn.Conv3d: F.conv3d}
_CONV_T = {nn.ConvTranspose1d: F.conv_transpose1d, nn.ConvTranspose2d: F.conv_transpose2d,
           nn.ConvTranspose3d: F.conv_transpose3d}


def _kind(module: nn.Module):
    for table in (_CONV, _CONV_T):
        for cls, fn in table.items():
            if isinstance(module, cls):
                return fn, table is _CONV_T
    raise ValueError(f"spectral_norm_conv takes a Conv or ConvTranspose layer, got {type(module).__name__}.")


def conv_linear_map(module: nn.Module):
    """The layer without its bias as a function (input, kernel) -> output."""
    fn, transposed = _kind(module)
    if transposed:
        return partial(fn, bias=None, stride=module.stride, padding=module.padding,
                       output_padding=module.output_padding, groups=module.groups, dilation=module.dilation)
    if module.padding_mode != "zeros" or isinstance(module.padding, str):
        raise ValueError(f"spectral_norm_conv needs numeric zero padding, got padding={module.padding!r}, "
                         f"padding_mode={module.padding_mode!r}.")
    return partial(fn, bias=None, stride=module.stride, padding=module.padding, dilation=module.dilation,
                   groups=module.groups)


def conv_adjoint_map(module: nn.Module, in_shape, out_shape):
    """Aᵀ as a function (output-shaped u, kernel) -> input-shaped gradient: conv ↔ conv_transpose
    with the same stride/padding/dilation/groups. A conv that drops input rows (stride not
    dividing the padded size) needs output_padding on its transpose to give back in_shape; the
    official code omits it and only handles shapes where none is needed."""
    fn, transposed = _kind(module)
    nd = len(in_shape)
    if transposed:  # the adjoint of conv_transpose is the plain conv: its output is in_shape exactly
        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
        return partial(conv, bias=None, stride=module.stride, padding=module.padding, dilation=module.dilation,
                       groups=module.groups)
    conv_t = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[nd]
    extra = tuple(i - ((o - 1) * s - 2 * p + d * (k - 1) + 1) for i, o, s, p, d, k in
                  zip(in_shape, out_shape, module.stride, module.padding, module.dilation, module.kernel_size))
    return partial(conv_t, bias=None, stride=module.stride, padding=module.padding, output_padding=extra,
                   groups=module.groups, dilation=module.dilation)


class SpectralNormConv(nn.Module):
    """Parametrisation kernel -> kernel / σ(A), σ the top singular value of the layer's linear map
    A at input shape (C_in, *in_shape), estimated by `n_power_iterations` steps per training
    forward (u, v kept as buffers, as torch's spectral_norm does)."""

    def __init__(self, module: nn.Module, in_shape, n_power_iterations: int = 1, eps: float = 1e-12,
                 init_iterations: int = 100):
        super().__init__()
        if n_power_iterations <= 0:
            raise ValueError(f"n_power_iterations must be positive, got {n_power_iterations}.")
        self.linear_map = conv_linear_map(module)
        self.n_power_iterations = n_power_iterations
        self.eps = eps
        kernel = module.weight.detach()
        v = torch.randn(1, module.in_channels, *in_shape, dtype=kernel.dtype, device=kernel.device)
        u = torch.randn_like(self.linear_map(v, kernel))
        self.adjoint_map = conv_adjoint_map(module, tuple(in_shape), tuple(u.shape[2:]))
        self.register_buffer("_u", F.normalize(u.flatten(), dim=0, eps=eps).view_as(u))
        self.register_buffer("_v", F.normalize(v.flatten(), dim=0, eps=eps).view_as(v))
        self._power_method(kernel, init_iterations)

    def _normalize(self, t: torch.Tensor) -> torch.Tensor:
        return t / t.norm().clamp_min(self.eps)

    @torch.no_grad()
    def _power_method(self, kernel: torch.Tensor, iterations: int) -> None:
        kernel = kernel.detach()
        for _ in range(iterations):
            self._u.copy_(self._normalize(self.linear_map(self._v, kernel)))
            self._v.copy_(self._normalize(self.adjoint_map(self._u, kernel)))

    def sigma(self, kernel: torch.Tensor) -> torch.Tensor:
        """⟨u, A v⟩: the current estimate of ‖A‖₂, differentiable in the kernel. u and v are
        cloned (as torch's spectral_norm does): autograd saves them for the backward pass, and
        the next training forward updates the buffers in place, which would otherwise fail a
        backward through two forwards (e.g. two decoder calls before one loss)."""
        u = self._u.clone(memory_format=torch.contiguous_format)
        v = self._v.clone(memory_format=torch.contiguous_format)
        return torch.sum(u * self.linear_map(v, kernel))

    def forward(self, kernel: torch.Tensor) -> torch.Tensor:
        if self.training:
            self._power_method(kernel, self.n_power_iterations)
        return kernel / self.sigma(kernel)


def spectral_norm_conv(module: nn.Module, in_shape, n_power_iterations: int = 1, eps: float = 1e-12) -> nn.Module:
    """Register `SpectralNormConv` on `module.weight`; in_shape is the input's spatial shape
    (H, W) without batch and channel (the official API)."""
    parametrize.register_parametrization(module, "weight", SpectralNormConv(module, in_shape, n_power_iterations, eps))
    return module


def spectral_norm_linear(module: nn.Linear) -> nn.Module:
    """torch's spectral_norm, exact for a Linear layer (its kernel is its map)."""
    return nn.utils.parametrizations.spectral_norm(module)
