"""The subspace algorithm for a mixture of linear regressions (Kong, Somani, Song, Kakade, Oh,
"Meta-learning for mixed linear regression", ICML 2020), the paper's second model-specific
baseline beside batch EM: estimate the span of the m components from moments, cluster the
prompts inside that span, refit each cluster by least squares.

Read against the authors' code (github.com/SewoongLab/RobustMetaLearningMLR,
`meta_learning_utils.py`: `get_Mhat`, `compute_subspace`, `get_H`, `clustering`): their moment
estimate of a task is β̂ = Xᵀy / t, the subspace matrix sym(β̂¹ᵀβ̂²) / n from two independent
sample sets of every task, its top-m singular vectors U, then a clustering of projected tasks.
Our simplifications (every prompt is used in every step, as EM uses the prompts the transformer
saw; the authors split tasks into light ones for the subspace and classification and heavy ones
for the clustering):

- the two sample sets are the two halves of each prompt (first ⌊k/2⌋ examples, the rest);
- clustering: k-means (scikit-learn, seeded) on the projected whole-prompt estimates Uᵀβ̂_b.
  Kong et al. cluster by pairwise distances instead: H_bc, an unbiased estimate of
  ‖Uᵀ(w_b − w_c)‖² from the two halves' inner products, then single linkage with a threshold in
  the paper (average linkage into m clusters in their code). k-means on Uᵀβ̂_b is the weaker
  choice: a prompt's estimate has covariance ((‖w_j‖² + σ²) I + w_j w_jᵀ) / k, which grows with
  its component's norm, so the clusters are not the equal isotropic ones k-means assumes (at the
  mini setting, seed 1, norms 1.2-5.0, it put two centres on one component); H_bc has no such
  noise term. `em_iters` refines the k-means estimates;
- refit: least squares on each cluster's prompts in all d dimensions (pseudo-inverse); Kong et
  al.'s classification step (assign more light tasks to the nearest estimate by likelihood, then
  refit) is replaced by optional batch EM iterations from these estimates (`em_iters`).
"""
from __future__ import annotations

import numpy as np
import torch
from einops import einsum
from sklearn.cluster import KMeans

from methods.mixreg_transformer.em import batch_em
from methods.mixreg_transformer.mixture import check_noise_std, check_prompts


def _check(xs: torch.Tensor, ys: torch.Tensor, num_components: int) -> None:
    check_prompts(xs, ys)
    if xs.shape[1] < 2:
        raise ValueError(f"the subspace estimate needs prompts of at least 2 examples (two halves), got {xs.shape[1]}")
    if num_components < 1 or num_components > len(xs):
        raise ValueError(f"num_components must be >= 1 and at most the {len(xs)} prompts, got {num_components}")


def half_moments(xs: torch.Tensor, ys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(β̂_A, β̂_B), each (B, d): β̂_A = Σ_{t∈A} y_t x_t / |A| on the first ⌊k/2⌋ examples, β̂_B
    the same on the rest. For x ~ N(0, I_d), E β̂ = w_j, and the halves are independent given j."""
    half = xs.shape[1] // 2
    a = einsum(xs[:, :half], ys[:, :half], "b k d, b k -> b d") / half
    b = einsum(xs[:, half:], ys[:, half:], "b k d, b k -> b d") / (xs.shape[1] - half)
    return a, b


def subspace_matrix(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """M = mean_b sym(β̂_A β̂_Bᵀ) (d, d), sym(Z) = (Z + Zᵀ) / 2: an unbiased estimate of
    E_j w_j w_jᵀ = Σ_j w_j w_jᵀ / m (uniform mixing) for x ~ N(0, I_d). Computed in float64."""
    check_prompts(xs, ys)
    if xs.shape[1] < 2:
        raise ValueError(f"the subspace estimate needs prompts of at least 2 examples (two halves), got {xs.shape[1]}")
    a, b = half_moments(xs.double(), ys.double())
    cross = einsum(a, b, "n d, n e -> d e") / len(a)
    return (cross + cross.T) / 2


def estimate_subspace(xs: torch.Tensor, ys: torch.Tensor, num_components: int) -> torch.Tensor:
    """U (d, r), r = min(m, d): orthonormal eigenvectors of M for its r largest eigenvalues (M is
    symmetric, so these are its top singular vectors whenever those eigenvalues dominate, as for
    E M = Σ_j w_j w_jᵀ / m, which is positive semi-definite). Float64."""
    _check(xs, ys, num_components)
    values, vectors = torch.linalg.eigh(subspace_matrix(xs, ys))            # ascending
    rank = min(num_components, xs.shape[-1])
    return vectors[:, values.argsort(descending=True)[:rank]]


def cluster_prompts(xs: torch.Tensor, ys: torch.Tensor, basis: torch.Tensor, num_components: int,
                    seed: int = 0) -> np.ndarray:
    """Cluster labels (B,) in 0..m−1: k-means (10 seeded restarts) on Uᵀβ̂_b, the whole prompt's
    moment estimate β̂_b = X_bᵀy_b / k projected into the estimated subspace."""
    moment = einsum(xs.double(), ys.double(), "b k d, b k -> b d") / xs.shape[1]
    projected = (moment @ basis.double()).numpy()                            # (B, r)
    state = int(np.random.SeedSequence(seed).generate_state(1)[0])           # any seed >= 0 -> uint32
    return KMeans(num_components, n_init=10, random_state=state).fit_predict(projected)


def cluster_least_squares(xs: torch.Tensor, ys: torch.Tensor, labels: np.ndarray, num_components: int) -> torch.Tensor:
    """(m, d): w_j = (Σ_{b∈C_j} X_bᵀX_b)⁺ Σ_{b∈C_j} X_bᵀy_b, least squares on cluster j's
    prompts in all d dimensions (the pseudo-inverse: a cluster with fewer than d examples gets the
    minimum-norm fit, an empty one 0). Float64."""
    x, y = xs.double(), ys.double()
    onehot = torch.nn.functional.one_hot(torch.as_tensor(labels, dtype=torch.long), num_components).double()
    # per-prompt X_bᵀX_b first: (B, d, d), never a (B, m, k, d) intermediate
    lhs = einsum(onehot, einsum(x, x, "b k d, b k e -> b d e"), "b m, b d e -> m d e")
    rhs = einsum(onehot, einsum(x, y, "b k d, b k -> b d"), "b m, b d -> m d")
    return (torch.linalg.pinv(lhs, hermitian=True) @ rhs.unsqueeze(-1)).squeeze(-1)


def subspace_components(xs: torch.Tensor, ys: torch.Tensor, num_components: int, noise_std: float | None = None,
                        seed: int = 0, em_iters: int = 0) -> torch.Tensor:
    """Estimates of the m components (m, d) from prompts xs (B, k, d), ys (B, k), in ys' dtype:
    the subspace U of M (`estimate_subspace`), k-means of the projected prompts
    (`cluster_prompts`, seeded by `seed`), least squares per cluster (`cluster_least_squares`),
    then `em_iters` batch EM iterations from there (needs `noise_std`). Predictions use
    `posterior_mean_predictions` with these estimates, as the EM row does."""
    _check(xs, ys, num_components)
    if em_iters < 0:
        raise ValueError(f"em_iters must be >= 0, got {em_iters}")
    if noise_std is not None:
        check_noise_std(noise_std)
    elif em_iters > 0:
        raise ValueError(f"em_iters={em_iters} needs noise_std (EM's E-step), got None")
    basis = estimate_subspace(xs, ys, num_components)
    labels = cluster_prompts(xs, ys, basis, num_components, seed)
    w = cluster_least_squares(xs, ys, labels, num_components)
    if em_iters > 0:
        w = batch_em(xs.double(), ys.double(), num_components, noise_std, iters=em_iters, init=w)
    return w.to(ys.dtype)
