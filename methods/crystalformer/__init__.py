"""Crystalformer: infinitely connected attention for periodic structures (ICLR 2024). See README.md."""
from __future__ import annotations

import torch

from hydra.utils import instantiate

from common import tasks
from common.callbacks import SWA
from common.config import UserError
from methods.crystalformer.attention import MODES, PeriodicAttention
from methods.crystalformer.data import load_crystals, split
from methods.crystalformer.model import Crystalformer, collate


@torch.no_grad()
def predict(model: Crystalformer, structures, batch_size: int = 64) -> torch.Tensor:
    """Predictions for a list of `pymatgen.core.Structure` (or crystal dicts)."""
    from methods.crystalformer.data import from_structure

    crystals = [s if isinstance(s, dict) else from_structure(s) for s in structures]
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    out = torch.cat([model(collate(crystals[i:i + batch_size], dev, model.reach)).float().cpu()
                     for i in range(0, len(crystals), batch_size)])
    model.train(was)
    return out


def mae(model, crystals) -> float:
    y = torch.tensor([c["target"] for c in crystals])
    return float((predict(model, crystals) - y).abs().mean())


def build(cfg) -> Crystalformer:
    if cfg.method.mode == "mean":
        raise UserError("method.mode=mean is the mean predictor: it has no model to build", exit_code=2)
    return instantiate(cfg.method.model)


def run(cfg, ctx) -> dict[str, float]:
    """Train `method.mode` (full | simplified | cutoff, or `mean` for the mean predictor) on the
    train split; report validation and test MAE (after SWA over the last `swa_fraction`)."""
    m = cfg.method
    if m.mode not in (*MODES, "mean"):
        raise UserError(f"method.mode must be one of {(*MODES, 'mean')}, got '{m.mode}'", exit_code=2)
    parts = split(load_crystals(cfg.dataset), cfg.dataset)
    train, val, test = parts["train"], parts["val"], parts["test"]
    y = torch.tensor([c["target"] for c in train])
    if m.mode == "mean":
        mean = float(y.mean())
        return {f"{k}_mae": float((torch.tensor([c["target"] for c in s]) - mean).abs().mean())
                for k, s in (("val", val), ("test", test))}
    model = build(cfg)
    model.y_mean.fill_(float(y.mean()))
    model.y_std.fill_(float(y.std()))
    callbacks, final = [], None
    if m.swa_fraction:  # averaged at every evaluation step of the last swa_fraction of training
        swa = SWA(model, start_step=int(cfg.trainer.max_steps * (1 - m.swa_fraction)),
                  every=max(1, int(cfg.trainer.eval_every)))
        callbacks, final = [swa], lambda: swa.module
    metrics = tasks.regress(ctx, model, train, lambda items: collate(items, ctx.device, model.reach),
                            lambda mod: {"val_mae": mae(mod, val), "test_mae": mae(mod, test)},
                            eval_fn=lambda mod, step: {"val_mae": mae(mod, val)}, callbacks=callbacks, final=final)
    metrics.pop("train_loss", None)   # a loss in units of the target std: not comparable across sets
    metrics["params_k"] = sum(p.numel() for p in model.parameters()) / 1e3
    return metrics


__all__ = ["Crystalformer", "MODES", "PeriodicAttention", "build", "collate", "mae", "predict", "run"]
