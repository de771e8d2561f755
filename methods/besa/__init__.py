"""BESA: Blockwise Parameter-Efficient Sparsity Allocation for LLM pruning (ICLR 2024). See README.md."""
from __future__ import annotations

import json

from hydra.utils import instantiate
from omegaconf import OmegaConf

from common import eval as evaluation
from common.config import UserError
from common.data import text
from methods.besa.baselines import magnitude, sparsegpt, wanda
from methods.besa.besa import BesaLinear, besa_loss, block_sparsity, output_error
from methods.besa.project import project_counts
from methods.besa.prune import METHODS, decoder_layers, overall_sparsity, prune, train_block


def tokens(tok, source: str, split: str):
    return tok(text.load_text(source, split), return_tensors="pt").input_ids[0]


def eval_tokens(tok, ev):
    """The perplexity text. `eval.split: test` is the first `max_tokens` tokens of the source (the
    pruning papers' protocol); `val` is the next `max_tokens`, disjoint from test, so that a
    hyper-parameter can be chosen without reading the text the tables report on."""
    ids = tokens(tok, ev.source, "test")
    split = ev.get("split", "test")
    if split == "test":
        return ids
    if split != "val" or not ev.max_tokens:
        raise UserError(f"eval.split must be test or val (val needs eval.max_tokens), got split={split!r}, "
                        f"max_tokens={ev.max_tokens!r}", exit_code=2)
    val = ids[ev.max_tokens:2 * ev.max_tokens]
    if len(val) < ev.max_tokens:
        raise UserError(f"eval.source {ev.source!r} has {len(ids)} tokens: too few for a validation span "
                        f"of {ev.max_tokens} after the test span", exit_code=2)
    return val


def build_pruner(cfg):
    """`prune` with the method's settings (`method.pruner`) and its own loop's recipe (`trainer`:
    the optimizer of the logits θ, epochs, sequences per step, progress bar) bound."""
    opt = OmegaConf.to_container(cfg.trainer.optimizer)
    return instantiate(cfg.method.pruner, batch_size=cfg.trainer.batch_size, epochs=cfg.trainer.epochs,
                       optimizer=lambda params: instantiate(opt, params=params), progress=cfg.trainer.progress)


def run(cfg, ctx) -> dict[str, float]:
    """Prune `method.model` with `method.pruner` (method `dense` keeps it unpruned) on calibration
    windows drawn with the run's seed from one text source; report the perplexity on another (`eval`)."""
    from common.nn.llm import load_causal_lm
    from methods.besa.plots import layer_sparsity_plot

    m, ev = cfg.method, cfg.eval
    kind = m.pruner.method
    if kind != "dense" and kind not in METHODS:
        raise UserError(f"method.pruner.method must be dense or one of {METHODS}, got '{kind}'", exit_code=2)
    model, tok = load_causal_lm(m.model)
    model.to(ctx.device)
    metrics: dict[str, float] = {}
    if kind != "dense":
        calib = text.random_windows(tokens(tok, m.calibration.source, "train"), m.calibration.n,
                                    m.calibration.seq_len, ctx.seed)     # (n, seq_len): what the seed varies
        per_layer = build_pruner(cfg)(model, calib.to(ctx.device), log=ctx.log, seed=ctx.seed)
        # wall time is not a metric (the smoke run's golden numbers must not depend on the machine)
        seconds = per_layer.pop("seconds_per_block")
        if "raw_sparsity" in per_layer:      # BESA: what its learned masks reach before any projection
            metrics["raw_sparsity"] = per_layer.pop("raw_sparsity")
        (ctx.run_dir / "prune_time.json").write_text(json.dumps({"seconds_per_block": seconds}))
        (ctx.run_dir / "layer_sparsity.json").write_text(json.dumps(per_layer, indent=1))
        if kind == "besa":
            layer_sparsity_plot(per_layer, ctx.run_dir / "layer_sparsity.png", m.pruner.sparsity,
                                f"BESA on {m.model} at {100 * m.pruner.sparsity:.0f}%")
        values = list(per_layer.values())
        metrics["layer_sparsity_min"], metrics["layer_sparsity_max"] = min(values), max(values)
    metrics["sparsity"] = overall_sparsity(model)
    windows = text.consecutive_windows(eval_tokens(tok, ev), ev.seq_len, ev.max_tokens)
    metrics["ppl"] = evaluation.perplexity(model, windows.to(ctx.device), batch_size=ev.batch_size)
    return metrics


__all__ = ["BesaLinear", "METHODS", "besa_loss", "block_sparsity", "build_pruner", "decoder_layers", "eval_tokens",
           "magnitude", "output_error", "overall_sparsity", "project_counts", "prune", "run", "sparsegpt", "train_block", "wanda"]
