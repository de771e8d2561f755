"""Accuracy of a classifier: logits of a split in batches, top-1 (%), macro-F1 (scikit-learn)."""
from __future__ import annotations

import torch

from common.eval.features import extract


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Top-1 accuracy in %."""
    if len(logits) != len(labels):
        raise ValueError(f"{len(logits)} predictions for {len(labels)} labels")
    return float(100.0 * (logits.argmax(-1) == labels).float().mean())


@torch.no_grad()
def predict(model: torch.nn.Module, inputs: torch.Tensor, batch_size: int, device) -> torch.Tensor:
    """The model's outputs on `inputs` in eval mode (its train/eval mode is restored)."""
    was = model.training
    model.eval()
    try:
        return extract(model, inputs, batch_size, device)
    finally:
        model.train(was)


def model_accuracy(model: torch.nn.Module, split: tuple[torch.Tensor, torch.Tensor], batch_size: int,
                   device) -> float:
    """Top-1 accuracy (%) of `model` on an (inputs, labels) split."""
    x, y = split
    return accuracy(predict(model, x, batch_size, device), y)


def macro_f1(pred, target) -> float:
    """Macro-averaged F1 in % (every class weighs the same: the imbalanced-data metric)."""
    from sklearn.metrics import f1_score

    return float(100.0 * f1_score(_np(target), _np(pred), average="macro"))


def _np(x):
    return x.cpu().numpy() if torch.is_tensor(x) else x
