"""BESA: Blockwise Parameter-Efficient Sparsity Allocation for LLM pruning (ICLR 2024). See README.md."""
from __future__ import annotations

import json

from common import runner
from common.config import UserError
from common.data import text
from methods.besa.baselines import magnitude, sparsegpt, wanda
from methods.besa.besa import BesaLinear, besa_loss, block_sparsity
from methods.besa.prune import METHODS, decoder_layers, overall_sparsity, perplexity, prune


def tokens(tok, source: str, split: str):
    return tok(text.load_text(source, split), return_tensors="pt").input_ids[0]


def run(cfg) -> dict[str, float]:
    """Prune `method.model` to `method.sparsity` with `method.prune` (or keep it dense) using
    calibration windows of one text source; report the perplexity on another."""
    from common.nn.llm import load_causal_lm
    from methods.besa.plots import layer_sparsity_plot

    m = cfg.method
    if m.prune != "dense" and m.prune not in METHODS:
        raise UserError(f"method.prune must be dense or one of {METHODS}, got '{m.prune}'", exit_code=2)
    ctx = runner.start(cfg)
    model, tok = load_causal_lm(m.model)
    model.to(ctx.hw.device)
    evaluation = text.consecutive_windows(tokens(tok, m.evaluation.source, "test"), m.evaluation.seq_len,
                                          m.evaluation.max_tokens)
    metrics: dict[str, float] = {}
    if m.prune != "dense":
        calib = text.random_windows(tokens(tok, m.calibration.source, "train"), m.calibration.n,
                                    m.calibration.seq_len, int(cfg.seed))
        per_layer = prune(model, calib.to(ctx.hw.device), m.sparsity, m.prune, batch=m.batch, besa=m.besa,
                          progress=bool(cfg.trainer.progress))
        metrics["seconds_per_block"] = per_layer.pop("seconds_per_block")
        (ctx.run_dir / "layer_sparsity.json").write_text(json.dumps(per_layer, indent=1))
        if m.prune == "besa":
            layer_sparsity_plot(per_layer, ctx.run_dir / "layer_sparsity.png", m.sparsity,
                                f"BESA on {m.model} at {100 * m.sparsity:.0f}%")
        values = list(per_layer.values())
        metrics["layer_sparsity_min"], metrics["layer_sparsity_max"] = min(values), max(values)
    metrics["sparsity"] = overall_sparsity(model)
    metrics["ppl"] = perplexity(model, evaluation.to(ctx.hw.device), batch=m.batch)
    ctx.logger.log(metrics, 0)
    ctx.logger.close()
    return metrics


__all__ = ["BesaLinear", "METHODS", "besa_loss", "block_sparsity", "decoder_layers", "magnitude",
           "overall_sparsity", "perplexity", "prune", "run", "sparsegpt", "wanda"]
