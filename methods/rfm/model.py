"""The vector field v_θ(t, x) and the flow-matching model that trains it."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from methods.rfm.loss import projected_euclidean_loss, rfm_loss, rfm_loss_on_path

VARIANTS = ("riemannian", "euclidean")
ACTIVATIONS = ("time_swish", "silu")   # the official time-dependent swish; the plain SiLU (an ablation)
TIME_INITS = ("zero", "default")       # the official zero time weights; PyTorch's default U(-1, 1) (an ablation)
LOSS_DIMS = ("ambient", "intrinsic")   # the official loss / ambient dimension; / intrinsic dimension (an ablation)


class TimeLinear(nn.Module):
    """W x + b + w · t: every layer sees time (the official ConcatLinear_v2,
    diffeq_layers/basic.py:64-72): W, b PyTorch's default, w starts at 0 and has no bias of its own,
    so at initialisation no layer's output depends on t (the field's only t-dependence then is the
    swish's β(t))."""

    def __init__(self, in_dim: int, out_dim: int, dtype: torch.dtype, time_init: str = "zero"):
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim, dtype=dtype)
        self.time = nn.Linear(1, out_dim, bias=False, dtype=dtype)
        if time_init == "zero":            # "default" keeps PyTorch's U(-1, 1) (fan-in 1): the ablation
            nn.init.zeros_(self.time.weight)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + self.time(t)


class TimeDependentSwish(nn.Module):
    """x · σ(β(t) · x) with a per-unit β(t) = softplus(W₂ softplus(W₁ t + b₁) + b₂), W₁: 1 → min(64,
    4 dim), W₂: → dim, PyTorch's default init (the official TimeDependentSwish,
    diffeq_layers/basic.py:487-500)."""

    def __init__(self, dim: int, dtype: torch.dtype):
        super().__init__()
        width = min(64, 4 * dim)
        self.beta = nn.Sequential(nn.Linear(1, width, dtype=dtype), nn.Softplus(),
                                  nn.Linear(width, dim, dtype=dtype), nn.Softplus())

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x * self.beta(t.reshape(-1, 1)))


class SiLU(nn.Module):
    """x · σ(x), the same for every t (the ablation of the time-dependent swish: β ≡ 1, no parameters,
    so the hidden layers' seeded initial draws are those of a field built without β networks)."""

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


class VectorField(nn.Module):
    """v_θ(t, x) = the tangent part at x of MLP(features(x), t) (the projection; on a mesh see
    Mesh.to_tangent): `layers` hidden layers of width `hidden`, each followed by a time-dependent
    swish, and a linear output in the ambient space (official tMLP, manifm/model/arch.py:20-39:
    num_layers = layers + 1). The MLP computes in `dtype` (float32, as the official code trains;
    `.double()` for likelihoods), the geometry in x's dtype. Ablations of the official form (README,
    "What moved the volcano margin"): activation="silu" (β ≡ 1), time_init="default" (time weights
    drawn like the others instead of 0)."""

    def __init__(self, manifold, hidden: int = 512, layers: int = 7, dtype: torch.dtype = torch.float32,
                 activation: str = "time_swish", time_init: str = "zero"):
        super().__init__()
        if hidden < 1 or layers < 1:
            raise ValueError(f"VectorField needs hidden >= 1 and layers >= 1, got hidden={hidden}, layers={layers}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got '{activation}'")
        if time_init not in TIME_INITS:
            raise ValueError(f"time_init must be one of {TIME_INITS}, got '{time_init}'")
        self.manifold = manifold
        dims = [manifold.feature_dim] + [hidden] * layers
        self.hidden, self.acts = nn.ModuleList(), nn.ModuleList()
        for a, b in zip(dims[:-1], dims[1:]):      # the official order (linear, swish, ...), so seeded initial draws match it
            self.hidden.append(TimeLinear(a, b, dtype, time_init))
            self.acts.append(TimeDependentSwish(b, dtype) if activation == "time_swish" else SiLU())
        self.out = TimeLinear(hidden, manifold.ambient_dim, dtype, time_init)

    def forward(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """t: scalar or (N,); x: (N, ambient) on the manifold -> (N, ambient) tangent at x."""
        dtype = self.out.linear.weight.dtype
        t = t.reshape(-1, 1).to(dtype).expand(x.shape[0], 1)
        h = self.manifold.features(x).to(dtype)
        for layer, act in zip(self.hidden, self.acts):
            h = act(layer(h, t), t)
        return self.manifold.to_tangent(x, self.out(h, t).to(x.dtype))


class FlowMatching(nn.Module):
    """Trains `field` by flow matching from the uniform density on `manifold` to the data.

    A batch of data points x1 (N, ambient) on the sphere or torus: x0 ~ uniform, t ~ U[0, 1] and
    variant="riemannian" regresses onto the geodesic path in closed form; variant="euclidean" (the
    ablation) onto the ambient straight line projected onto the manifold. On a mesh the batch is
    already points of simulated conditional paths, (x_t, u_t, t) from `SimulatedPaths`. The loss is
    divided by the ambient dimension (official) or, with loss_dim="intrinsic" (an ablation), by the
    manifold's own dimension."""

    def __init__(self, field: VectorField, manifold, variant: str = "riemannian", loss_dim: str = "ambient"):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got '{variant}'")
        if loss_dim not in LOSS_DIMS:
            raise ValueError(f"loss_dim must be one of {LOSS_DIMS}, got '{loss_dim}'")
        if hasattr(manifold, "dist_grad") and variant != "riemannian":
            raise ValueError("the euclidean ablation is defined for the sphere and the torus, not for a mesh")
        self.field, self.manifold, self.variant = field, manifold, variant
        self.dim = manifold.ambient_dim if loss_dim == "ambient" else getattr(manifold, "dim", None)
        if self.dim is None:
            raise ValueError(f"loss_dim='intrinsic' needs a manifold with a `dim`, {type(manifold).__name__} has none")

    def training_step(self, batch):
        if isinstance(batch, (tuple, list)):                    # points of simulated paths (a mesh)
            x_t, u_t, t = batch
            return rfm_loss_on_path(self.field, self.manifold, x_t, u_t, t, dim=self.dim), {}
        x1 = batch
        x0 = self.manifold.random_uniform(len(x1), dtype=x1.dtype).to(x1.device)
        t = torch.rand(len(x1), dtype=x1.dtype, device=x1.device)
        if self.variant == "riemannian":
            return rfm_loss(self.field, self.manifold, x0, x1, t, dim=self.dim), {}
        return projected_euclidean_loss(self.field, self.manifold, x0, x1, t, dim=self.dim), {}
