"""MSG: Masked Structural Growth for 2x Faster Language Model Pre-training (Yao et al., ICLR 2024).
See README.md."""
from __future__ import annotations

import functools

import torch
from hydra.utils import instantiate

from common.data.text import consecutive_windows
from common.data.text_lm import CharTokenizer, documents, split_documents, token_stream
from methods.msg.grow import (copy_adam_state, embed_old, finish_growth, grow, mask_value, net2net_grow,
                              set_growth_mask, stack_indices)
from methods.msg.model import MSGGPT, TinyLM, masked_layer_norm
from methods.msg.train import loss_jump, train, train_flops


@functools.lru_cache(maxsize=2)
def corpus(source: str, val_fraction: float, split_seed: int):
    """(tokenizer, train ids, val ids): documents split once; the char tokenizer fit on train."""
    train_docs, val_docs = split_documents(documents(source), val_fraction, split_seed)
    tok = CharTokenizer.from_texts(train_docs)
    return tok, token_stream(train_docs, tok), token_stream(val_docs, tok)


def _corpus(cfg):
    d = cfg.method.data
    return corpus(str(d.source), float(d.val_fraction), int(d.split_seed))


def build(cfg) -> TinyLM:
    """The start (small) model; its vocabulary is `method.data.vocab_size` when set (paper tier: the
    BPE of the paper's corpus), else the char tokenizer's."""
    vocab = cfg.method.data.get("vocab_size")
    return instantiate(cfg.method.model, vocab_size=int(vocab) if vocab else _corpus(cfg)[0].vocab_size)


@torch.no_grad()
def val_loss(model: torch.nn.Module, windows: torch.Tensor, batch: int = 16) -> float:
    """Mean next-token loss over the validation windows (equal-length windows: mean of batch means)."""
    was = model.training
    model.eval()
    losses = [float(model(w, labels=w).loss) * len(w) for w in windows.split(batch)]
    model.train(was)
    return sum(losses) / len(windows)


def run(cfg, ctx) -> dict[str, float]:
    """The row's growth loop (methods/msg/train.py) on random training windows; `val_loss` on the first
    `method.eval_windows` consecutive validation windows; `loss_jump` on the first batch of them."""
    _, train_ids, val_ids = _corpus(cfg)
    t = int(cfg.method.model.n_positions)
    windows = consecutive_windows(val_ids, t)[: int(cfg.method.eval_windows)].to(ctx.device)
    start = build(cfg)
    sampler = ctx.sampler(len(train_ids) - t)
    span = torch.arange(t)

    def batches(step: int):
        return train_ids[sampler(step)[:, None] + span].to(ctx.device)

    model, metrics = train(cfg, ctx, start, batches, windows[: int(cfg.trainer.batch_size)], log=ctx.log)
    ctx.last_step = int(metrics["steps"])
    return {"val_loss": val_loss(model, windows), **metrics}


__all__ = ["MSGGPT", "TinyLM", "masked_layer_norm", "grow", "set_growth_mask", "finish_growth", "mask_value",
           "embed_old", "copy_adam_state", "net2net_grow", "stack_indices", "loss_jump", "train_flops", "train",
           "val_loss", "corpus", "build", "run"]
