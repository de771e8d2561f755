"""Full-batch training with best-validation selection (a hypergraph fits in one batch, so this
method keeps its own ~30-line loop instead of common/trainer's step loop)."""
from __future__ import annotations

import copy
from typing import Callable

import torch

from methods.lighthgnn.metrics import accuracy


def fit(model: torch.nn.Module, forward: Callable[[], torch.Tensor], loss_fn: Callable[[torch.Tensor, int], torch.Tensor],
        labels: torch.Tensor, val_idx: torch.Tensor, epochs: int, lr: float, weight_decay: float,
        log: Callable[[dict], None] | None = None) -> tuple[torch.nn.Module, float]:
    """Adam for `epochs` full-batch steps; return the model with the best validation accuracy."""
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    best_val, best_state = -1.0, None
    for epoch in range(epochs):
        model.train()
        loss = loss_fn(forward(), epoch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            val = accuracy(forward(), labels, val_idx)
        if val > best_val:
            best_val, best_state = val, copy.deepcopy(model.state_dict())
        if log is not None:
            log({"epoch": epoch, "loss": loss.item(), "val_acc": val})
    model.load_state_dict(best_state)
    model.eval()
    return model, best_val
