"""How far an augmentation acts on the embedding as a rotation, and how much the embedding
still knows about it."""
from __future__ import annotations

import torch


def procrustes_rotation(F: torch.Tensor, F_a: torch.Tensor) -> torch.Tensor:
    """R* = argmin over rotations R (RᵀR = I, det R = +1) of ‖F R − F_a‖_F (Wahba's problem).

    With Fᵀ F_a = U S Vᵀ, R* = U diag(1, ..., 1, det(U Vᵀ)) Vᵀ (Umeyama's sign correction).
    F, F_a: (N, d). Returns (d, d).
    """
    U, _, Vh = torch.linalg.svd(F.double().T @ F_a.double())
    signs = torch.ones(U.shape[0], dtype=torch.float64, device=F.device)
    signs[-1] = torch.sign(torch.linalg.det(U @ Vh))
    return ((U * signs) @ Vh).to(F.dtype)


def wahba_error(F: torch.Tensor, F_a: torch.Tensor) -> float:
    """W_f = ‖F R* − F_a‖_F / ‖F_a‖_F for one augmentation a (0 when a acts as a rotation)."""
    R = procrustes_rotation(F, F_a)
    return float(torch.linalg.norm(F @ R - F_a) / torch.linalg.norm(F_a))


def rotation_residual(F: torch.Tensor, F_a: torch.Tensor) -> float:
    """min over rotations R of ‖F R − F_a‖²_F / N: how far a is from acting as a rotation, per image."""
    return float(torch.linalg.norm(F @ procrustes_rotation(F, F_a) - F_a) ** 2 / F.shape[0])


def displacement(F: torch.Tensor, F_a: torch.Tensor) -> float:
    """‖F − F_a‖²_F / N: how far a moves the embedding at all, per image (0 = invariant)."""
    return float(torch.linalg.norm(F - F_a) ** 2 / F.shape[0])


def relative_equivariance(F: torch.Tensor, F_augs: torch.Tensor) -> float:
    """γ_f = E_a[min_R ‖F R − F_a‖²_F] / E_a[‖F − F_a‖²_F].

    F: (N, d); F_augs: (A, N, d), one slice per augmentation a. The denominator is how much
    the augmentations move the embedding at all, so an invariant encoder (F_a ≈ F) does not
    score as equivariant by moving nothing. With unit-norm rows ‖F_a‖²_F = N, so W_f² is the
    residual per image and γ_f = residual / displacement: a lower γ_f at an equal W_f means the
    embedding moved more (less invariant), not that the residual fell.
    """
    residual = sum(rotation_residual(F, Fa) for Fa in F_augs)
    moved = sum(displacement(F, Fa) for Fa in F_augs)
    return residual / moved


def sensitivity_r2(train_z: torch.Tensor, train_t: torch.Tensor, test_z: torch.Tensor,
                   test_t: torch.Tensor, alpha: float = 1.0) -> float:
    """R² on held-out data of a ridge regression that predicts an attribute t from the embedding:
    an augmentation's strength (the brightness factor, t: (N,)) or an image's hue as a point on
    the circle (t: (N, 2) = (cos h, sin h); R² averaged over the two outputs)."""
    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score

    reg = Ridge(alpha=alpha).fit(train_z.numpy(), train_t.numpy())
    return float(r2_score(test_t.numpy(), reg.predict(test_z.numpy())))
