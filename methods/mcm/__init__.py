"""MCM: Masked Cell Modeling for anomaly detection in tabular data (ICLR 2024). See README.md."""
from __future__ import annotations

from hydra.utils import instantiate
from omegaconf import OmegaConf

from common.config import UserError
from methods.mcm.baselines import MCM_ROWS, PYOD, TRIVIAL, MeanDistance, StandardizedBaseline, make_detector
from methods.mcm.detector import MCMDetector
from methods.mcm.loss import anomaly_score, diversity_loss, mcm_loss, reconstruction_loss
from methods.mcm.model import MCM, FixedMasks, MaskGenerator
from methods.mcm.suite import rank_summary, score_detector, score_suite, table_split


def detector_factory(cfg, seed: int, device="cpu", kind: str | None = None):
    """A fresh detector per table. `kind` (default `method.detector`): mcm or one of the MCM
    rows (MCM_ROWS: `method.model` with the row's keys changed; trained with the run's own loop
    recipe `trainer`: optimizer, epochs, batch size, progress bar), a pyod baseline on
    standardised rows, or mean_distance (the trivial scorer)."""
    kind = kind or cfg.method.detector
    if kind in MCM_ROWS:
        opt = OmegaConf.to_container(cfg.trainer.optimizer)
        t = cfg.trainer
        keys = dict(epochs=t.epochs, batch_size=t.batch_size, progress=t.progress, device=str(device),
                    optimizer=lambda params: instantiate(opt, params=params))
        keys.update(MCM_ROWS[kind])
        return lambda: instantiate(cfg.method.model, seed=seed, **keys)
    if kind in PYOD:
        return lambda: StandardizedBaseline(kind, seed)
    if kind in TRIVIAL:
        return lambda: MeanDistance(seed)
    raise UserError(f"method.detector must be one of {', '.join([*MCM_ROWS, *PYOD, *TRIVIAL])}, got '{kind}'",
                    exit_code=2)


def build(cfg) -> MCM:
    """The untrained MCM of the first table in `dataset.tables` (its width from
    `dataset.num_features`), from the config alone."""
    first = cfg.dataset.tables[0]
    return instantiate(cfg.method.model).build_model(cfg.dataset.num_features[first])


def run(cfg, ctx) -> dict[str, float]:
    """Each table of `dataset.tables`: a one-class split drawn with the run seed, a fresh
    detector seeded with the run seed fitted on the normal fitted rows, scored on the test part
    (or, with eval.on=val, on the validation part carved from the training side); AUC-PR and
    AUROC per table and their means. With `method.detectors` (a list), every detector of the list
    runs on the same splits and the metrics come as sub-rows `<detector>/<metric>`, with the rank
    summary over tables (`<det>/rank_auprc`, `<det>/wilcoxon_p_<other>`)."""
    d = cfg.dataset
    ev = cfg.get("eval") or {}
    step = iter(range(10**9))   # one curve across the suite's tables (and detectors), in order
    common = dict(root=d.root, download=d.download, max_train=OmegaConf.to_container(d.max_train),
                  seed=ctx.seed if d.get("split_seed") is None else d.split_seed,
                  num_features=OmegaConf.to_container(d.num_features), on=ev.get("on", "test"),
                  source=d.name, val_share=ev.get("val_share", 0.2))
    log = lambda row: ctx.log(row, step=next(step))   # noqa: E731
    detectors = list(cfg.method.get("detectors") or [])
    if not detectors:
        return score_suite(detector_factory(cfg, ctx.seed, ctx.device), list(d.tables), log=log, **common)
    if len(set(detectors)) != len(detectors):
        raise UserError(f"method.detectors lists a detector twice: {detectors}", exit_code=2)
    per: dict[str, dict[str, float]] = {}
    for kind in detectors:
        per[kind] = score_suite(detector_factory(cfg, ctx.seed, ctx.device, kind), list(d.tables), log=log, **common)
    out = {f"{kind}/{k}": v for kind, m in per.items() for k, v in m.items()}
    return out | rank_summary(per, list(d.tables))


__all__ = ["MCM", "MCMDetector", "MCM_ROWS", "PYOD", "TRIVIAL", "FixedMasks", "MeanDistance", "MaskGenerator", "StandardizedBaseline",
           "anomaly_score", "build", "detector_factory", "diversity_loss", "make_detector", "mcm_loss",
           "rank_summary", "reconstruction_loss", "run", "score_detector", "score_suite", "table_split"]
