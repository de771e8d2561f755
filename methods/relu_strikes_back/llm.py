"""Relufication of a pretrained LM (§4, stage 1) on SmolLM2-135M: one load per run, four sub-rows.

`smollm2` (as loaded, SiLU), `swap_only` (SiLU -> ReLU, no training), `smollm2_tuned` (SiLU, the
same continued training: the budget control), `relufied` (SiLU -> ReLU, then the same training).
Both trainings see the same batches (a pure function of the step and the run seed).
With `method.llm.stage2: true` a fifth sub-row `relufied_s2` (stage 2: also a ReLU after the norms
feeding QKV and the FFN) gets the same training. With `method.data.reader` (a `_target_` block, e.g.
common.data.refinedweb.RefinedWeb) the batches and validation windows stream from that reader
instead of the document split (the paper tier); the mini tables set neither."""
from __future__ import annotations

import copy
import functools

import torch
from hydra.utils import instantiate
from torch import nn

from common import tasks
from common.data.text import consecutive_windows
from common.data.text_lm import documents, split_documents
from methods.relu_strikes_back.metrics import lm_metrics
from methods.relu_strikes_back.relufy import relufy
from methods.relu_strikes_back.zero_shot import zero_shot_metrics

SUB_ROWS = ("smollm2", "swap_only", "smollm2_tuned", "relufied")
STAGE2_ROW = "relufied_s2"


class CausalLMStep(nn.Module):
    """A Hugging Face causal LM with the `training_step` the shared Trainer calls (next-token loss)."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, *args, **kwargs):
        return self.lm(*args, **kwargs)

    def training_step(self, batch: torch.Tensor):
        return self.lm(batch, labels=batch, use_cache=False).loss, {}


def encode_stream(docs, tokenizer, sep: str = "\n\n") -> torch.Tensor:
    """The documents joined by `sep`, encoded by a Hugging Face tokenizer without special tokens."""
    docs = list(docs)
    if not docs:
        raise ValueError("encode_stream needs at least one document")
    return torch.tensor(tokenizer(sep.join(docs), add_special_tokens=False)["input_ids"], dtype=torch.long)


@functools.lru_cache(maxsize=2)
def _llm(name: str, dtype: str = "float32"):
    from common.config import UserError
    from common.nn.llm import load_causal_lm   # transformers only when a table needs it
    try:
        return load_causal_lm(name, dtype)
    except UserError as err:
        if "llm extra" in str(err):   # a missing dependency keeps its exit 1
            raise
        raise UserError(str(err), exit_code=2) from err   # a model that is not there: a bad choice, exit 2 (issue #47)


def llm_corpus(tokenizer, source: str, val_fraction: float, split_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(train ids, val ids): the tiny-LM table's document split, encoded by the LM's own tokenizer."""
    train, val = split_documents(documents(source), val_fraction, split_seed)
    return encode_stream(train, tokenizer), encode_stream(val, tokenizer)


def run_llm(cfg, ctx) -> dict[str, float]:
    """The four sub-rows as `<sub>/<metric>` (metrics.lm_metrics, gated FFN FLOPs) on the first
    `method.llm.eval_windows` consecutive validation windows of `method.llm.seq_len` tokens."""
    m, llm = cfg.method, cfg.method.llm
    base, tok = _llm(str(llm.name), str(llm.get("dtype", "float32")))
    base = copy.deepcopy(base)   # the cached load stays untouched (relufy works in place)
    d = m.data
    t = int(llm.seq_len)
    reader = instantiate(d.reader) if d.get("reader") is not None else None
    if reader is None:
        train_ids, val_ids = llm_corpus(tok, str(d.source), float(d.val_fraction), int(d.split_seed))
        windows = consecutive_windows(val_ids, t)[: int(llm.eval_windows)].to(ctx.device)
    else:
        windows = reader.val_windows(tok, t, int(llm.eval_windows)).to(ctx.device)
    evaluate = functools.partial(lm_metrics, windows=windows, d_model=int(base.config.hidden_size),
                                 agg_t=int(m.agg_t), shuffle_seed=ctx.seed, batch_size=int(llm.eval_batch),
                                 gated=True)
    base = base.to(ctx.device)

    def scored(model: nn.Module) -> dict[str, float]:   # the metrics, and zero-shot accuracy when configured
        return {**evaluate(model), **zero_shot_metrics(cfg, model, tok, t, ctx.device, hf=True)}

    out = {f"smollm2/{k}": v for k, v in scored(base).items()}
    out |= {f"swap_only/{k}": v for k, v in scored(relufy(copy.deepcopy(base), stage=1,
                                                         shift=float(m.relufy.shift))).items()}
    if reader is None:
        sampler = ctx.sampler(len(train_ids) - t)
        span = torch.arange(t)

        def batches(step: int):
            return train_ids[sampler(step)[:, None] + span].to(ctx.device)
    else:
        stream = reader.train_batches(tok, t, int(cfg.trainer.batch_size))

        def batches(step: int):
            return stream(step).to(ctx.device)

    def tune(model: nn.Module, stage: str) -> dict[str, float]:
        wrapped = CausalLMStep(model).train()
        got = tasks.fit_and_evaluate(ctx, wrapped, batches, lambda w: evaluate(w.lm), stage=stage)
        got |= zero_shot_metrics(cfg, wrapped.lm, tok, t, ctx.device, hf=True)
        return {f"{stage}/{k}": v for k, v in got.items()}

    out |= tune(copy.deepcopy(base), "smollm2_tuned")
    if llm.get("stage2", False):
        out |= tune(relufy(copy.deepcopy(base), stage=2, shift=float(m.relufy.shift)), STAGE2_ROW)
    out |= tune(relufy(base, stage=1, shift=float(m.relufy.shift)), "relufied")
    return out
