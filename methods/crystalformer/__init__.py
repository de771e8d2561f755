"""Crystalformer: infinitely connected attention for periodic structures (ICLR 2024). See README.md."""
from __future__ import annotations

import torch

from common import runner
from common.config import UserError
from common.data import StepSampler
from common.trainer import Trainer
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


def run(cfg) -> dict[str, float]:
    """Train `method.mode` (full | simplified | cutoff, or `mean` for the mean predictor) on the
    train split; report validation and test MAE (after SWA over the last `swa_fraction`)."""
    m = cfg.method
    if m.mode not in (*MODES, "mean"):
        raise UserError(f"method.mode must be one of {(*MODES, 'mean')}, got '{m.mode}'", exit_code=2)
    ctx = runner.start(cfg)
    parts = split(load_crystals(cfg.dataset), cfg.dataset)
    train, val, test = parts["train"], parts["val"], parts["test"]
    y = torch.tensor([c["target"] for c in train])
    if m.mode == "mean":
        mean = float(y.mean())
        metrics = {f"{k}_mae": float((torch.tensor([c["target"] for c in s]) - mean).abs().mean())
                   for k, s in (("val", val), ("test", test))}
        ctx.logger.log(metrics, 0)
        ctx.logger.close()
        return metrics
    model = Crystalformer(dim=m.dim, depth=m.depth, heads=m.heads, ffn=m.ffn, mode=m.mode, n_rbf=m.n_rbf,
                          r_max=m.r_max, r0=m.r0, a=m.a, b=m.b, cover_sigmas=m.cover_sigmas, cutoff=m.cutoff)
    model.y_mean.fill_(float(y.mean()))
    model.y_std.fill_(float(y.std()))
    sampler = StepSampler(len(train), cfg.trainer.batch_size, int(cfg.seed))

    def batch(step: int):
        return collate([train[i] for i in sampler(step).tolist()], ctx.hw.device, model.reach)

    swa = torch.optim.swa_utils.AveragedModel(model)
    swa_start = int(cfg.trainer.max_steps * (1 - m.swa_fraction))

    def evaluate(mod, step):
        if m.swa_fraction and step > swa_start:
            swa.update_parameters(mod)
        return {"val_mae": mae(mod, val)}

    trainer = Trainer(model, cfg.trainer, ctx.hw, ctx.run_dir, ctx.logger, batch_fn=batch, eval_fn=evaluate,
                      extra_state={"swa": swa})  # a resumed run keeps the average it had
    trainer.fit(resume=cfg.resume)
    # update_parameters also keeps the buffers (m, s of σ, the target scale) in sync with the model
    final = swa.module if m.swa_fraction and swa.n_averaged > 0 else model
    metrics = {"val_mae": mae(final, val), "test_mae": mae(final, test),
               "params_k": sum(p.numel() for p in model.parameters()) / 1e3}
    ctx.logger.log(metrics, trainer.step)
    ctx.logger.close()
    return metrics


__all__ = ["Crystalformer", "MODES", "PeriodicAttention", "collate", "mae", "predict", "run"]
