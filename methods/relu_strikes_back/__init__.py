"""ReLU Strikes Back: activation sparsity in LLMs (Mirzadeh et al., ICLR 2024). See README.md."""
from __future__ import annotations

import functools

import torch
from hydra.utils import instantiate

from common import tasks
from common.data.text import consecutive_windows
from common.data.text_lm import BPETokenizer, CharTokenizer, documents, split_documents, token_stream
from methods.relu_strikes_back.llm import CausalLMStep, run_llm
from methods.relu_strikes_back.metrics import lm_metrics, record_attention_inputs
from methods.relu_strikes_back.model import TinyLM
from methods.relu_strikes_back.relufy import relufy, sparse_ffn
from methods.relu_strikes_back.zero_shot import zero_shot_metrics
from methods.relu_strikes_back.sparsity import (ShiftedReLU, activation_sparsity, aggregated_sparsity, dead_fraction,
                                                ffn_flops, live_sparsity, matched_shuffled_aggregated_sparsity,
                                                shuffled_aggregated_sparsity, uniform_aggregated_sparsity)


@functools.lru_cache(maxsize=4)
def corpus(source: str, tokenizer: str, val_fraction: float, split_seed: int, bpe_vocab: int):
    """(tokenizer, train ids, val ids): documents split once by `split_seed`; the tokenizer is fit
    on the training documents only."""
    train, val = split_documents(documents(source), val_fraction, split_seed)
    if tokenizer == "char":
        tok = CharTokenizer.from_texts(train)
    elif tokenizer == "bpe":
        tok = BPETokenizer.train(train, bpe_vocab)
    else:
        raise ValueError(f"unknown tokenizer '{tokenizer}'; choose char or bpe")
    return tok, token_stream(train, tok), token_stream(val, tok)


def _corpus(cfg):
    d = cfg.method.data
    return corpus(str(d.source), str(d.tokenizer), float(d.val_fraction), int(d.split_seed), int(d.bpe_vocab))


def reader_vocab(cfg, tokenizer=None) -> int:
    """The embedding rows of a model trained from scratch on `method.data.reader`: `method.data.vocab_size`
    (OPT's 50,272, its tokenizer's 50,265 padded to a multiple of 8) or, when null, the tokenizer's length."""
    vocab = cfg.method.data.get("vocab_size")
    if tokenizer is None and vocab is None:
        tokenizer = instantiate(cfg.method.data.reader.tokenizer)
    if vocab is None:
        return len(tokenizer)
    if tokenizer is not None and int(vocab) < len(tokenizer):
        raise ValueError(f"method.data.vocab_size {vocab} is smaller than the tokenizer's {len(tokenizer)} tokens")
    return int(vocab)


def build(cfg):
    """The network a config trains, from the config alone (the paper tier's --dry-run builds it on the
    meta device): with `method.llm` the Hub model's architecture (transformers' AutoConfig; random
    weights: run_llm loads the real ones), with `method.data.reader` the tiny LM at `reader_vocab`, else
    the tiny LM at the vocabulary of the tokenizer fit on the training documents."""
    m = cfg.method
    if m.get("llm") is not None:
        import transformers
        return transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(str(m.llm.name)))
    if m.data.get("reader") is not None:
        return instantiate(m.model, vocab_size=reader_vocab(cfg))
    tok = _corpus(cfg)[0]
    return instantiate(m.model, vocab_size=tok.vocab_size)


def run(cfg, ctx) -> dict[str, float]:
    """Train the LM (the shared Trainer) on random windows of the training stream; metrics on the
    first `method.eval_windows` consecutive validation windows, after training and (sub-row `init/`) at
    step 0; with `method.relufy.stage` > 0 the activations are relufied before training. With
    `method.llm` set, a pretrained LM is relufied instead (llm.run_llm: SmolLM2's four sub-rows).
    With `method.data.reader` (a `_target_` block with a `tokenizer`, `val_windows` and
    `train_batches`, e.g. common.data.refinedweb.RefinedWeb: the paper tier) the data stream from
    that reader and the vocabulary is `reader_vocab`'s. With `method.zero_shot` the trained model's
    zero-shot accuracy (lm-eval) joins the metrics."""
    if cfg.method.get("llm") is not None:
        return run_llm(cfg, ctx)
    t, m = int(cfg.method.model.n_positions), cfg.method
    reader = instantiate(m.data.reader) if m.data.get("reader") is not None else None
    if reader is None:
        _, train_ids, val_ids = _corpus(cfg)
        windows = consecutive_windows(val_ids, t)[: int(m.eval_windows)]
        model = build(cfg)
    else:
        windows = reader.val_windows(reader.tokenizer, t, int(m.eval_windows))
        model = instantiate(m.model, vocab_size=reader_vocab(cfg, reader.tokenizer))
    if int(m.relufy.stage):
        relufy(model, stage=int(m.relufy.stage), shift=float(m.relufy.shift))
    model = model.to(ctx.device)
    windows = windows.to(ctx.device)
    evaluate = functools.partial(lm_metrics, windows=windows, d_model=int(m.model.n_embd), agg_t=int(m.agg_t),
                                 shuffle_seed=ctx.seed)
    init = {f"init/{k}": v for k, v in evaluate(model).items()}
    if reader is None:
        sampler = ctx.sampler(len(train_ids) - t)   # window starts; this rank's shard of each global batch
        span = torch.arange(t)

        def batches(step: int):
            return train_ids[sampler(step)[:, None] + span].to(ctx.device)
    else:
        stream = reader.train_batches(reader.tokenizer, t, int(cfg.trainer.batch_size))

        def batches(step: int):
            return stream(step).to(ctx.device)

    metrics = tasks.fit_and_evaluate(ctx, model, batches, evaluate)
    tokenizer = _corpus(cfg)[0] if reader is None else reader.tokenizer
    return {**metrics, **zero_shot_metrics(cfg, model, tokenizer, t, ctx.device), **init}


__all__ = ["ShiftedReLU", "activation_sparsity", "aggregated_sparsity", "shuffled_aggregated_sparsity",
           "uniform_aggregated_sparsity", "matched_shuffled_aggregated_sparsity", "dead_fraction", "live_sparsity",
           "CausalLMStep", "run_llm", "relufy", "sparse_ffn", "ffn_flops", "lm_metrics", "record_attention_inputs",
           "TinyLM", "corpus", "build", "reader_vocab", "zero_shot_metrics", "run"]
