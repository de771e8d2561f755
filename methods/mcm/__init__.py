"""MCM: Masked Cell Modeling for anomaly detection in tabular data (ICLR 2024). See README.md."""
from __future__ import annotations

from hydra.utils import instantiate
from omegaconf import OmegaConf

from common.config import UserError
from methods.mcm.baselines import MCM_ROWS, PYOD, StandardizedBaseline, make_detector
from methods.mcm.detector import MCMDetector
from methods.mcm.loss import anomaly_score, diversity_loss, mcm_loss, reconstruction_loss
from methods.mcm.model import MCM, FixedMasks, MaskGenerator
from methods.mcm.suite import score_detector, score_suite, table_split


def detector_factory(cfg, seed: int, device="cpu"):
    """A fresh detector per table: `method.model` (MCMDetector, trained with the run's own loop
    recipe `trainer`: optimizer, epochs, batch size, progress bar) when `method.detector` is
    mcm, else the pyod baseline of that name on standardised rows."""
    kind = cfg.method.detector
    if kind == "mcm":
        opt = OmegaConf.to_container(cfg.trainer.optimizer)
        t = cfg.trainer
        return lambda: instantiate(cfg.method.model, seed=seed, epochs=t.epochs, batch_size=t.batch_size,
                                   optimizer=lambda params: instantiate(opt, params=params),
                                   progress=t.progress, device=str(device))
    if kind not in PYOD:
        raise UserError(f"method.detector must be mcm or one of {', '.join(PYOD)}, got '{kind}'", exit_code=2)
    return lambda: StandardizedBaseline(kind, seed)


def build(cfg) -> MCM:
    """The untrained MCM of the first table in `dataset.tables` (its width from
    `dataset.num_features`), from the config alone."""
    first = cfg.dataset.tables[0]
    return instantiate(cfg.method.model).build_model(cfg.dataset.num_features[first])


def run(cfg, ctx) -> dict[str, float]:
    """Each table of `dataset.tables`: split once (dataset.split_seed), fit a fresh detector
    seeded with the run seed on the normal training half, score the test half; AUC-PR and
    AUROC per table and their means over the suite."""
    d = cfg.dataset
    step = iter(range(10**9))   # one curve across the suite's tables, in table order
    return score_suite(detector_factory(cfg, ctx.seed, ctx.device), list(d.tables), d.root, d.download,
                       OmegaConf.to_container(d.max_train), d.split_seed, OmegaConf.to_container(d.num_features),
                       log=lambda row: ctx.log(row, step=next(step)))


__all__ = ["MCM", "MCMDetector", "MCM_ROWS", "PYOD", "FixedMasks", "MaskGenerator", "StandardizedBaseline",
           "anomaly_score", "build", "detector_factory", "diversity_loss", "make_detector", "mcm_loss",
           "reconstruction_loss", "run", "score_detector", "score_suite", "table_split"]
