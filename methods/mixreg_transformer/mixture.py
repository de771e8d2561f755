"""The generative process: a fixed, finite mixture of linear regressions (paper section 2)."""
from __future__ import annotations

import torch

from common.icl.prompts import check_prompts  # noqa: F401  (moved to common/icl, issue #49)


def check_noise_std(noise_std: float) -> None:
    if not noise_std >= 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}")


def check_components(components: torch.Tensor, dim: int) -> None:
    if components.dim() != 2 or components.shape[1] != dim:
        raise ValueError(f"components must have shape (m, {dim}) to match the prompts' x width {dim}, "
                         f"got {tuple(components.shape)}")


COMPONENT_DRAWS = ("sphere", "gaussian")


def draw_components(num: int, dim: int, generator: torch.Generator, draw: str = "sphere") -> torch.Tensor:
    """num vectors (num, d) in float64: `sphere` uniform on the sphere of radius √d (a Gaussian
    draw rescaled row by row, so ‖w‖² = d exactly), `gaussian` w ~ N(0, I_d) (E‖w‖² = d). Both
    have second moment E w wᵀ = I_d, the isotropic prior the `ridge` row assumes."""
    if draw not in COMPONENT_DRAWS:
        raise ValueError(f"component draw must be one of {COMPONENT_DRAWS}, got '{draw}'")
    w = torch.randn(num, dim, generator=generator, dtype=torch.float64)
    if draw == "sphere":
        w = w * (dim ** 0.5 / w.norm(dim=1, keepdim=True))
    return w


class MixtureOfRegressions:
    """m vectors w*_j drawn once from `seed`: on the sphere of radius √d (`draw="sphere"`, the
    paper's setting as we read it; README, Deviations) or w*_j ~ N(0, I_d) (`draw="gaussian"`).
    A prompt of k examples: j uniform on 1..m, x_i ~ N(0, I_d), y_i = ⟨w*_j, x_i⟩ + σ ε_i with
    ε_i ~ N(0, 1). The Bayes predictor's prior is the uniform distribution on these m vectors,
    whichever way they were drawn."""

    def __init__(self, dim: int, num_components: int, noise_std: float, seed: int = 0,
                 dtype: torch.dtype = torch.float32, draw: str = "sphere"):
        if dim < 1 or num_components < 1:
            raise ValueError(f"dim and num_components must be >= 1, got dim={dim}, num_components={num_components}")
        check_noise_std(noise_std)
        self.dim, self.num_components, self.noise_std, self.draw = dim, num_components, float(noise_std), draw
        gen = torch.Generator().manual_seed(seed)
        self.components = draw_components(num_components, dim, gen, draw).to(dtype)  # (m, d)

    def sample(self, batch: int, length: int, generator: torch.Generator | None = None):
        """(xs (B, k, d), ys (B, k), component (B,)) for B = batch prompts of k = length examples."""
        dtype = self.components.dtype
        component = torch.randint(self.num_components, (batch,), generator=generator)
        xs = torch.randn(batch, length, self.dim, generator=generator, dtype=dtype)
        noise = torch.randn(batch, length, generator=generator, dtype=dtype)
        ys = torch.einsum("bkd,bd->bk", xs, self.components[component]) + self.noise_std * noise
        return xs, ys, component
