"""The factor-model instance of the paper (Section 5.1) and its two learners, in numpy float64.

x = B z + σ ε, z ~ N(0, I_r), ε ~ N(0, I_d); y = βᵀz + τ ν (informative) or y = γᵀε + τ ν with γ ⊥ col(B)
(uninformative: the label lives in the noise the latent model discards). Pretraining is the MLE of
the latent model on m unlabeled x (probabilistic PCA, closed form), then ERM (least squares) on its
posterior mean E[z | x] with the n labels; supervised learning is least squares / ridge on x itself.
"""
from __future__ import annotations

import numpy as np

from methods.unsup_pretrain.moments import ppca_from_scatter

RIDGE_ALPHAS = np.logspace(-3, 5, 33)


def _points(x, name: str = "x") -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a matrix (points, dim), got shape {x.shape}")
    if x.shape[0] < 2:
        raise ValueError(f"{name} needs at least 2 points, got {x.shape[0]}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} has non-finite entries")
    return x


def _rank(rank, dim: int) -> int:
    if int(rank) != rank or not 1 <= rank < dim:
        raise ValueError(f"rank must be an integer in [1, {dim}) (the dimension is {dim}), got {rank}")
    return int(rank)


class FactorModel:
    """A seeded factor-model instance: B = √s · U_r with U Haar-orthonormal (so BᵀB = s I), β a unit
    vector of R^r, γ a unit vector orthogonal to col(B); σ = `noise_std`, τ = `label_noise`."""

    def __init__(self, dim: int, rank: int, spike: float, noise_std: float = 1.0, label_noise: float = 0.5,
                 informative: bool = True, seed: int = 0):
        if int(dim) != dim or dim < 2:
            raise ValueError(f"dim must be an integer >= 2, got {dim}")
        self.dim, self.rank = int(dim), _rank(rank, int(dim))
        if not spike > 0:
            raise ValueError(f"spike (the factors' signal strength s, BᵀB = s I) must be > 0, got {spike}")
        if not noise_std > 0:
            raise ValueError(f"noise_std must be > 0, got {noise_std}")
        if not label_noise >= 0:
            raise ValueError(f"label_noise must be >= 0, got {label_noise}")
        self.spike, self.noise_std, self.label_noise = float(spike), float(noise_std), float(label_noise)
        self.informative = bool(informative)
        rng = np.random.default_rng(seed)
        q, r = np.linalg.qr(rng.standard_normal((self.dim, self.rank)))
        basis = q * np.sign(np.diag(r))                       # Haar: fix the signs of the QR factor
        self.loadings = np.sqrt(self.spike) * basis           # (d, r)
        beta = rng.standard_normal(self.rank)
        self.beta = beta / np.linalg.norm(beta)               # (r,)
        g = rng.standard_normal(self.dim)
        g -= basis @ (basis.T @ g)
        self.gamma = g / np.linalg.norm(g)                    # (d,), orthogonal to col(B)
        self._covariance = self.loadings @ self.loadings.T + self.noise_std ** 2 * np.eye(self.dim)
        self._weights = (np.linalg.solve(self._covariance, self.loadings @ self.beta) if self.informative
                         else self.gamma / self.noise_std)

    def covariance(self) -> np.ndarray:
        """Σ = BBᵀ + σ² I, the covariance of x (its mean is 0)."""
        return self._covariance.copy()

    def regression_weights(self) -> np.ndarray:
        """a* with E[y | x] = a*ᵀx: Σ⁻¹Bβ (informative), γ/σ (uninformative: Σγ = σ²γ, Cov(x, y) = σγ)."""
        return self._weights.copy()

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(x (n, d), y (n,)) i.i.d. from the model."""
        z = rng.standard_normal((n, self.rank))
        eps = rng.standard_normal((n, self.dim))
        nu = rng.standard_normal(n)
        x = z @ self.loadings.T + self.noise_std * eps
        signal = z @ self.beta if self.informative else eps @ self.gamma
        return x, signal + self.label_noise * nu

    def excess_risk(self, weights, intercept: float) -> float:
        """E(y − wᵀx − c)² − E(y − a*ᵀx)², exact: (w − a*)ᵀΣ(w − a*) + c² (x and y have mean 0)."""
        diff = np.asarray(weights, dtype=np.float64) - self._weights
        return float(diff @ self._covariance @ diff + float(intercept) ** 2)


def fit_ppca(x, rank: int) -> tuple[np.ndarray, float, np.ndarray]:
    """MLE of the factor model x = Bz + μ + σε (probabilistic PCA, Tipping & Bishop 1999, closed form):
    S = (1/m) Σ (x − x̄)(x − x̄)ᵀ with eigenvalues λ₁ ≥ … ≥ λ_d, σ̂² = mean(λ_{r+1..d}),
    B̂ = U_r diag(√max(λ_i − σ̂², 0)) (the rotation R = I). Returns (B̂ (d, r), σ̂², x̄ (d,))."""
    x = _points(x)
    rank = _rank(rank, x.shape[1])
    mean = x.mean(axis=0)
    centred = x - mean
    return ppca_from_scatter(centred.T @ centred / x.shape[0], mean, rank)   # S with the MLE's 1/m


def posterior_mean_features(x, loadings, noise_var: float, mean) -> np.ndarray:
    """E[z | x] under the factor model: M⁻¹Bᵀ(x − μ), M = BᵀB + σ² I (= BᵀΣ⁻¹(x − μ)). (n, d) -> (n, r)."""
    x = np.asarray(x, dtype=np.float64)
    loadings = np.asarray(loadings, dtype=np.float64)
    gram = loadings.T @ loadings + noise_var * np.eye(loadings.shape[1])
    return np.linalg.lstsq(gram, loadings.T @ (x - mean).T, rcond=None)[0].T


def ols(features, y) -> tuple[np.ndarray, float]:
    """Least squares with an intercept: (w, c) minimising Σ (y_i − wᵀf_i − c)²."""
    features = _points(features, "features")
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (features.shape[0],):
        raise ValueError(f"y must have shape ({features.shape[0]},), got {y.shape}")
    design = np.hstack([features, np.ones((features.shape[0], 1))])
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    return coef[:-1], float(coef[-1])


def ridge_loo(x, y, alphas=RIDGE_ALPHAS) -> tuple[np.ndarray, float, float]:
    """Ridge regression with an unpenalised intercept, α chosen by exact leave-one-out:
    the LOO residual of a linear smoother ŷ = Hy is e_i / (1 − H_ii), H = 11ᵀ/n + X_c(X_cᵀX_c + αI)⁻¹X_cᵀ;
    the first α of `alphas` with the smallest mean squared LOO residual. Returns (w, c, α)."""
    x = _points(x)
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (x.shape[0],):
        raise ValueError(f"y must have shape ({x.shape[0]},), got {y.shape}")
    alphas = np.asarray(alphas, dtype=np.float64)
    if alphas.ndim != 1 or len(alphas) == 0 or np.any(alphas <= 0):
        raise ValueError(f"alphas must be a non-empty list of positive numbers, got {alphas}")
    n = x.shape[0]
    x_mean, y_mean = x.mean(axis=0), y.mean()
    u, s, vt = np.linalg.svd(x - x_mean, full_matrices=False)
    uty = u.T @ (y - y_mean)
    shrink = s ** 2 / (s ** 2 + alphas[:, None])                    # (alphas, rank)
    fitted = (shrink * uty) @ u.T                                    # (alphas, n), centred fits
    leverage = 1.0 / n + (shrink @ (u ** 2).T)                       # (alphas, n), diag of H
    with np.errstate(divide="ignore", invalid="ignore"):
        loo = ((y - y_mean - fitted) / (1.0 - leverage)) ** 2
    score = np.where(np.isfinite(loo.mean(axis=1)), loo.mean(axis=1), np.inf)   # an interpolating α: no LOO fit
    best = int(np.argmin(score))                                     # argmin: the first minimiser
    w = vt.T @ (s / (s ** 2 + alphas[best]) * uty)
    return w, float(y_mean - w @ x_mean), float(alphas[best])


def composite_predictor(loadings, noise_var: float, mean, w_features, c_features: float) -> tuple[np.ndarray, float]:
    """The predictor wᵀx + c that ERM on φ(x) = M⁻¹Bᵀ(x − x̄) amounts to: w = B M⁻¹ w_φ, c = c_φ − wᵀx̄."""
    loadings = np.asarray(loadings, dtype=np.float64)
    gram = loadings.T @ loadings + noise_var * np.eye(loadings.shape[1])
    w = loadings @ np.linalg.lstsq(gram, np.asarray(w_features, dtype=np.float64), rcond=None)[0]
    return w, float(c_features - w @ mean)


def pretrain_predictor(x_unlabeled, x, y, rank: int) -> tuple[np.ndarray, float]:
    """MLE + ERM: PPCA on the unlabeled x, then least squares on the posterior mean of the labeled x;
    returned as the linear predictor (w, c) on x."""
    loadings, noise_var, mean = fit_ppca(x_unlabeled, rank)
    w_phi, c_phi = ols(posterior_mean_features(x, loadings, noise_var, mean), y)
    return composite_predictor(loadings, noise_var, mean, w_phi, c_phi)


def oracle_predictor(model: FactorModel, x, y) -> tuple[np.ndarray, float]:
    """Least squares on the true posterior mean E[z | x] (the latent model known: m = ∞)."""
    zero = np.zeros(model.dim)
    features = posterior_mean_features(x, model.loadings, model.noise_std ** 2, zero)
    w_phi, c_phi = ols(features, y)
    return composite_predictor(model.loadings, model.noise_std ** 2, zero, w_phi, c_phi)


def shuffle_columns(x, rng: np.random.Generator) -> np.ndarray:
    """Each column permuted on its own: the marginals kept, the factor structure (covariance) gone."""
    return rng.permuted(np.asarray(x, dtype=np.float64), axis=0)
