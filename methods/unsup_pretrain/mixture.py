"""The Gaussian-mixture instance (the paper's Section 5.2): K spherical clusters, a label that is a
function of the cluster. Pretraining fits the mixture by EM on unlabeled x (the MLE's usual
algorithm) and learns the label from the responsibilities; supervised learning is logistic
regression on x."""
from __future__ import annotations

import warnings

import numpy as np
from scipy.special import softmax


class GaussianMixtureTask:
    """K means with |μ_k| = `separation` (random directions from the seed), z uniform on {0..K−1},
    x = μ_z + σ ε, y = 1[z < K/2]."""

    def __init__(self, dim: int, components: int, separation: float, noise_std: float = 1.0, seed: int = 0):
        if int(dim) != dim or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim}")
        if int(components) != components or components < 2:
            raise ValueError(f"components must be an integer >= 2, got {components}")
        if not separation > 0:
            raise ValueError(f"separation (the norm of each mean) must be > 0, got {separation}")
        if not noise_std > 0:
            raise ValueError(f"noise_std must be > 0, got {noise_std}")
        self.dim, self.components = int(dim), int(components)
        self.separation, self.noise_std = float(separation), float(noise_std)
        directions = np.random.default_rng(seed).standard_normal((self.components, self.dim))
        self.means = self.separation * directions / np.linalg.norm(directions, axis=1, keepdims=True)  # (K, d)

    def labels(self, z) -> np.ndarray:
        return (np.asarray(z) < self.components / 2).astype(np.int64)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x (n, d), y (n,), z (n,))."""
        z = rng.integers(0, self.components, size=n)
        x = self.means[z] + self.noise_std * rng.standard_normal((n, self.dim))
        return x, self.labels(z), z

    def posterior(self, x) -> np.ndarray:
        """P(z = k | x) by Bayes' rule, uniform prior, equal spherical covariances: (n, d) -> (n, K)."""
        x = np.asarray(x, dtype=np.float64)
        sq = ((x[:, None, :] - self.means[None]) ** 2).sum(axis=2)
        return softmax(-sq / (2 * self.noise_std ** 2), axis=1)

    def bayes_predict(self, x) -> np.ndarray:
        """The Bayes rule: 1 when P(y = 1 | x) = Σ_{k < K/2} P(z = k | x) > 1/2."""
        upper = int(np.ceil(self.components / 2))         # k < K/2  <=>  k < ceil(K/2)
        return (self.posterior(x)[:, :upper].sum(axis=1) > 0.5).astype(np.int64)


def fit_em(x_unlabeled, components: int, em_inits: int, seed: int):
    """MLE of a spherical Gaussian mixture by EM (scikit-learn, `em_inits` k-means starts, best kept)."""
    from sklearn.mixture import GaussianMixture

    if np.asarray(x_unlabeled).shape[0] < components:
        raise ValueError(f"EM with {components} components needs at least {components} points, got "
                         f"{np.asarray(x_unlabeled).shape[0]}")
    return GaussianMixture(components, covariance_type="spherical", n_init=em_inits, random_state=seed).fit(x_unlabeled)


def pretrain_em_classifier(x_unlabeled, x, y, components: int, *, em_inits: int = 3, c: float = 1.0e4, seed: int = 0):
    """EM on the unlabeled x, then logistic regression (inverse penalty `c`) on the responsibilities
    of the labeled x. Returns predict(x_new) -> labels."""
    from sklearn.linear_model import LogisticRegression

    mixture = fit_em(x_unlabeled, components, em_inits, seed)
    head = LogisticRegression(C=c, max_iter=5000).fit(mixture.predict_proba(x), y)
    return lambda x_new: head.predict(mixture.predict_proba(x_new))


def logistic_classifier(x, y, *, cs: int = 10, folds: int = 3):
    """Supervised baseline: logistic regression on x, its penalty chosen by `folds`-fold CV over `cs` values."""
    from sklearn.linear_model import LogisticRegressionCV

    with warnings.catch_warnings():      # scikit-learn >= 1.8 announces new defaults; the ones used are set here
        warnings.simplefilter("ignore", FutureWarning)
        return LogisticRegressionCV(Cs=cs, cv=folds, scoring="accuracy", max_iter=5000).fit(x, y).predict


def error_rate(predicted, y) -> float:
    return float(np.mean(np.asarray(predicted) != np.asarray(y)))
