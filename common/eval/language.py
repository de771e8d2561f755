"""Language-model perplexity: exp of the mean next-token negative log-likelihood."""
from __future__ import annotations

import math

import torch
from torch import nn


@torch.no_grad()
def perplexity(model: nn.Module, ids: torch.Tensor, *, batch_size: int, seq_len: int | None = None) -> float:
    """Over windows of `ids` ((n, seq_len) token ids, or 1-D and cut into `seq_len` windows);
    `model(x).logits` as in Hugging Face causal LMs."""
    if ids.dim() == 1:
        if not seq_len:
            raise ValueError("1-D token ids need seq_len to be cut into windows")
        n = len(ids) // seq_len
        ids = ids[: n * seq_len].view(n, seq_len)
    was = model.training
    model.eval()
    nll, count = 0.0, 0
    for i in range(0, len(ids), batch_size):
        x = ids[i:i + batch_size]
        logits = model(x, use_cache=False).logits[:, :-1].float()
        nll += float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                                       reduction="sum"))
        count += x[:, 1:].numel()
    model.train(was)
    return math.exp(nll / count)
