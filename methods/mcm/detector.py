"""MCMDetector: standardise, train MCM on normal rows, score new rows (pyod's fit /
decision_function convention). The training schedule is the official Model/Trainer.py's."""
from __future__ import annotations

from typing import Callable, Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from methods.mcm.loss import anomaly_score, diversity_scale, mcm_loss
from methods.mcm.model import MCM


def check_rows(x, num_features: int | None = None, what: str = "x") -> np.ndarray:
    """x as a float32 (N, d) array; a one-sentence ValueError for anything else."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2 or len(x) == 0:
        raise ValueError(f"{what} must be a non-empty 2-D array (rows, features), got shape {x.shape}.")
    bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
    if len(bad):
        raise ValueError(f"{what} has {len(bad)} rows with NaN or inf values (first: row {bad[0]}); drop or impute them.")
    if num_features is not None and x.shape[1] != num_features:
        raise ValueError(f"{what} has {x.shape[1]} features but the detector was fitted on {num_features}.")
    return x


class MCMDetector:
    """Masked Cell Modeling as a one-class detector. Paper/official defaults; the extra
    keywords (after `seed`) select the ablations and the diversity target:
    masking 'learned' | 'none' (plain AE, num_masks=1, λ=0) | 'random' (fixed binary masks, λ=0);
    diversity_on 'masks' (cosine of M = sigmoid(G(x)), the issue's default) | 'logits'
    (cosine of G(x), the official code). `optimizer`: a factory params -> Optimizer (the run's
    `trainer.optimizer`); None builds the official Adam(lr, weight_decay)."""

    def __init__(self, num_masks: int = 15, lambda_div: float = 5.0, temperature: float = 0.1, epochs: int = 200,
                 batch_size: int = 512, lr: float = 0.05, lr_gamma: float = 0.98, weight_decay: float = 1e-5,
                 hidden_dim: int = 256, latent_dim: int = 128, seed: int = 0, *, encoder_layers: int = 3,
                 decoder_layers: int = 3, mask_layers: int = 3, masking: Literal["learned", "none", "random"] = "learned", mask_ratio: float = 0.5,
                 diversity_on: Literal["masks", "logits"] = "masks", standardize: bool = True, shuffle: bool = True, device: str = "cpu",
                 optimizer: Callable[[object], torch.optim.Optimizer] | None = None, progress: bool = False):
        if lambda_div < 0:
            raise ValueError(f"lambda_div must be non-negative, got {lambda_div}.")
        if lambda_div > 0 and masking != "learned":
            raise ValueError(f"masking='{masking}' has no learned masks to diversify; set lambda_div=0 (got {lambda_div}).")
        if lambda_div > 0:
            diversity_scale(num_masks)   # raises for K < 3
        if diversity_on not in ("masks", "logits"):
            raise ValueError(f"diversity_on must be 'masks' or 'logits', got '{diversity_on}'.")
        if epochs < 0 or batch_size < 1:
            raise ValueError(f"epochs must be >= 0 (0: score the untrained model) and batch_size positive, "
                             f"got {epochs} and {batch_size}.")
        self.num_masks, self.lambda_div, self.temperature = num_masks, lambda_div, temperature
        self.epochs, self.batch_size, self.lr, self.lr_gamma, self.weight_decay = epochs, batch_size, lr, lr_gamma, weight_decay
        self.hidden_dim, self.latent_dim, self.seed = hidden_dim, latent_dim, seed
        self.layers = dict(encoder_layers=encoder_layers, decoder_layers=decoder_layers, mask_layers=mask_layers)
        self.masking, self.mask_ratio, self.diversity_on = masking, mask_ratio, diversity_on
        self.standardize, self.shuffle, self.device = standardize, shuffle, torch.device(device)
        self.optimizer, self.progress = optimizer, progress
        self.model: MCM | None = None
        self.history: list[dict[str, float]] = []

    def build_model(self, num_features: int, generator: torch.Generator | None = None) -> MCM:
        """The untrained MCM this detector fits on rows of `num_features` columns."""
        return MCM(num_features, self.num_masks, self.hidden_dim, self.latent_dim, **self.layers,
                   masking=self.masking, mask_ratio=self.mask_ratio, generator=generator)

    def _scaled(self, x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy((x - self.mean_) / self.std_).to(self.device)

    def fit(self, x, y=None, log: Callable[[dict], None] | None = None) -> "MCMDetector":
        """Train on the rows of x (all assumed normal; y is ignored, as in pyod). The last
        epoch's model is kept (the official evaluate() scores self.model, not its saved best)."""
        x = check_rows(x)
        # training statistics only; a constant feature keeps scale 1 instead of dividing by 0
        self.mean_ = x.mean(0) if self.standardize else np.zeros(x.shape[1], np.float32)
        std = x.std(0) if self.standardize else np.ones(x.shape[1], np.float32)
        self.std_ = np.where(std > 0, std, 1.0).astype(np.float32)
        data = self._scaled(x)
        gen = torch.Generator().manual_seed(self.seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.model = self.build_model(x.shape[1], gen).to(self.device)
        params = self.model.parameters()
        opt = (self.optimizer(params) if self.optimizer is not None
               else torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay))
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=self.lr_gamma)
        self.model.train()
        self.history = []
        for epoch in tqdm(range(self.epochs), desc="MCM epochs", disable=not self.progress):
            order = torch.randperm(len(data), generator=gen) if self.shuffle else torch.arange(len(data))
            for start in range(0, len(data), self.batch_size):
                batch = data[order[start:start + self.batch_size].to(self.device)]     # (b, d)
                x_hat, masks, logits = self.model(batch, return_logits=True)
                target = logits if self.diversity_on == "logits" else masks
                loss, parts = mcm_loss(batch, x_hat, target, self.lambda_div, self.temperature)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            sched.step()
            if not torch.isfinite(loss):
                raise FloatingPointError(f"MCM training diverged at epoch {epoch} (loss {loss.item()}); lower lr.")
            row = {"epoch": epoch, "loss": loss.item(), **{k: v.item() for k, v in parts.items()}}
            self.history.append(row)
            if log is not None:
                log(row)
        self.model.eval()
        return self

    @torch.no_grad()
    def decision_function(self, x) -> np.ndarray:
        """Anomaly scores (N,), higher = more anomalous."""
        if self.model is None:
            raise ValueError("MCMDetector.decision_function needs fit() first.")
        data = self._scaled(check_rows(x, self.model.num_features))
        scores = [anomaly_score(part, self.model(part)[0]) for part in data.split(4096)]
        return torch.cat(scores).cpu().numpy().astype(np.float64)
