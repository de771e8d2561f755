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
from methods.besa.prune import METHODS, decoder_layers, overall_sparsity, prune, train_block


def tokens(tok, source: str, split: str):
    return tok(text.load_text(source, split), return_tensors="pt").input_ids[0]


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
        per_layer = build_pruner(cfg)(model, calib.to(ctx.device), log=ctx.log)
        # wall time is not a metric (the smoke run's golden numbers must not depend on the machine)
        seconds = per_layer.pop("seconds_per_block")
        (ctx.run_dir / "prune_time.json").write_text(json.dumps({"seconds_per_block": seconds}))
        (ctx.run_dir / "layer_sparsity.json").write_text(json.dumps(per_layer, indent=1))
        if kind == "besa":
            layer_sparsity_plot(per_layer, ctx.run_dir / "layer_sparsity.png", m.pruner.sparsity,
                                f"BESA on {m.model} at {100 * m.pruner.sparsity:.0f}%")
        values = list(per_layer.values())
        metrics["layer_sparsity_min"], metrics["layer_sparsity_max"] = min(values), max(values)
    metrics["sparsity"] = overall_sparsity(model)
    windows = text.consecutive_windows(tokens(tok, ev.source, "test"), ev.seq_len, ev.max_tokens)
    metrics["ppl"] = evaluation.perplexity(model, windows.to(ctx.device), batch_size=ev.batch_size)
    return metrics


__all__ = ["BesaLinear", "METHODS", "besa_loss", "block_sparsity", "build_pruner", "decoder_layers", "magnitude",
           "output_error", "overall_sparsity", "prune", "run", "sparsegpt", "train_block", "wanda"]
