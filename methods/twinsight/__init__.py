"""Twin-sight: twin supervised and unsupervised models for federated learning with few labels
(Zhang, Yang, Tian, Wang, Liu, Han; ICLR 2024). See README.md."""
from __future__ import annotations

from hydra.utils import instantiate

from common.config import UserError
from methods.twinsight.loss import NORMALIZERS, client_loss, fixmatch_loss, neighbourhood_loss, single_loss
from methods.twinsight.model import TinyCNN, TwinModel


def build(cfg) -> TwinModel:
    """The twins, from the config alone."""
    m = cfg.method
    return instantiate(m.model, encoder_sup=instantiate(m.encoder), encoder_unsup=instantiate(m.encoder))


def run(cfg, ctx) -> dict[str, float]:
    """Every row in `method.rows` trained by FedAvg on the same few-label clients; metrics
    `<row>/acc` (test %, the global supervised twin after the last round), `<row>/acc_mean`
    (mean over the rounds' evaluations), `<row>/rounds_to_target` (the first evaluated round whose
    accuracy reaches `method.target_acc`, rounds + 1 when none does) and the collapse diagnostics after the last round:
    `<row>/top_share` (% of predictions in the most predicted class), `<row>/feat_cos` (mean
    off-diagonal cosine of the features), `<row>/feat_rank` (their effective rank). `method.eval_split: val` scores on training images outside
    the pool (the pilot's validation set)."""
    from common.ssl import Augment
    from common.tasks.federated import check_federated
    from methods.twinsight.data import few_label_clients, load_pool
    from methods.twinsight.train import ROWS, run_row

    m = cfg.method
    check_federated(m.federated)
    unknown = [r for r in m.rows if r not in ROWS]
    if unknown or not m.rows:
        raise UserError(f"method.rows must be a non-empty list of {', '.join(ROWS)}, got {list(m.rows)}", exit_code=2)
    if m.eval_split not in ("test", "val"):
        raise UserError(f"method.eval_split must be test or val, got {m.eval_split!r}", exit_code=2)
    if not float(m.clip_grad) >= 0:
        raise UserError(f"method.clip_grad must be >= 0 (0: no clipping), got {m.clip_grad!r}", exit_code=2)
    if not 0.0 <= float(m.target_acc) <= 100.0:
        raise UserError(f"method.target_acc must be an accuracy in [0, 100] (%), got {m.target_acc!r}", exit_code=2)
    if not float(m.fixmatch_weight) >= 0:
        raise UserError(f"method.fixmatch_weight must be >= 0, got {m.fixmatch_weight!r}", exit_code=2)
    dc = m.data
    pool = load_pool(cfg.dataset, int(dc.pool_size), int(dc.test_size), ctx.seed, str(m.eval_split))
    d = few_label_clients(*pool, num_clients=int(m.federated.num_clients), num_labeled=int(dc.num_labeled),
                          alpha=float(m.federated.alpha), min_size=int(m.federated.min_size),
                          val_fraction=float(dc.val_fraction), seed=ctx.seed)
    eval_x, eval_y = d.test_images, d.test_labels
    weak, strong = Augment(**m.weak), Augment(**m.strong)
    ctx.log({"labeled_clients": list(d.labeled), "client_sizes": [len(c) for c in d.clients],
             "labeled_share": sum(len(d.clients[k]) for k in d.labeled) / sum(len(c) for c in d.clients)}, 0)
    out: dict[str, float] = {}
    for row in m.rows:
        res = run_row(ctx, m, row, d, weak, strong, eval_x, eval_y, ctx.log)
        out.update({f"{row}/{k}": v for k, v in res.items()})
    return out


__all__ = ["NORMALIZERS", "TinyCNN", "TwinModel", "build", "client_loss", "fixmatch_loss", "neighbourhood_loss",
           "run", "single_loss"]
