"""DATM: Towards Lossless Dataset Distillation via Difficulty-Aligned Trajectory Matching (ICLR 2024).
See README.md. Built on the dataset distillation floor, common/distill."""
from __future__ import annotations

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from common.config import UserError
from common.distill import ConvNet, class_balanced_indices, evaluate_synthetic, expert_buffer, kmeans_coreset
from methods.datm.data import distill_splits
from methods.datm.distill import DATM
from methods.datm.labels import correct_logit_average, expert_logits, select_correct
from methods.datm.loss import matching_loss
from methods.datm.schedule import sample_start_epoch, start_epoch_bound

ROWS = ("distill", "random", "kmeans")
EXTRA_EVALS = ("init", "random", "kmeans")


def make_net_factory(cfg):
    d = cfg.dataset
    return lambda: instantiate(cfg.method.network, in_chans=d.in_chans, num_classes=d.num_classes, img_size=d.img_size)


def build(cfg) -> ConvNet:
    """The student / expert network from the config alone."""
    return make_net_factory(cfg)()


def buffer_settings(cfg) -> dict:
    m, d = cfg.method, cfg.dataset
    return dict(OmegaConf.to_container(m.experts), data=d.name, split=f"train-minus-val{m.val_share}"
                if m.eval_on == "val" else "train", preprocessing=m.preprocess, zca_eps=m.zca_eps,
                network=OmegaConf.to_container(m.network), in_chans=d.in_chans, img_size=d.img_size)


def run(cfg, ctx) -> dict[str, float]:
    """Experts (cached buffer), then the row: `distill` (DATM or MTT, by method.datm), `random`
    (a class-balanced real subset with hard labels) or `kmeans` (floor kmeans_coreset on pixels);
    then K fresh ConvNets trained on the set (lr: the learnt alpha, or evaluation.lr_real) and
    tested on the evaluation split. Metric `acc` (%, mean over the K nets)."""
    m = cfg.method
    if m.row not in ROWS:
        raise UserError(f"method.row must be one of {', '.join(ROWS)}, got '{m.row}'", exit_code=2)
    extra = list(m.get("extra_evals") or [])
    if any(e not in EXTRA_EVALS for e in extra) or (extra and m.row != "distill"):
        raise UserError(f"method.extra_evals takes {', '.join(EXTRA_EVALS)} on method.row=distill, got {extra} "
                        f"on row '{m.row}'", exit_code=2)
    (x, y), (xe, ye) = distill_splits(cfg.dataset.name, cfg.dataset.root, cfg.dataset.download, m.eval_on,
                                      m.val_share, m.preprocess, m.zca_eps)
    make_net = make_net_factory(cfg)
    datm: DATM = instantiate(m.datm)
    gen = torch.Generator().manual_seed(int(ctx.seed))
    ev = m.evaluation
    evaluate = lambda images, targets, lr: evaluate_synthetic(   # noqa: E731
        make_net, images, targets, xe, ye, lr, int(ev.num_nets), int(ev.epochs), int(ev.batch_size), int(ctx.seed),
        momentum=float(ev.momentum), weight_decay=float(ev.weight_decay), vectorized=bool(ev.vectorized))
    out: dict[str, float] = {}
    sets: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    if m.row == "distill":
        buffer = expert_buffer(buffer_settings(cfg), x, y, make_net, m.cache_dir)
        student = make_net()
        log_every = max(1, int(m.log_every))
        log = lambda row, it: ctx.log(row, step=it) if it % log_every == 0 else None   # noqa: E731
        datm.check_buffer(buffer, student)
        initial = datm.initial_set(student, buffer, x, y, gen)   # the generator's first draw, as inside distill
        sets["init"] = (initial.images.detach().clone(), initial.targets.detach().clone())
        syn, stats = datm.distill(student, buffer, x, y, gen, log=log, initial=initial)
        images, targets, lr = syn.images.detach(), syn.targets.detach(), float(syn.lr.detach())
        out.update(stats)
    else:
        idx = real_subset(m.row, x, y, datm.ipc, int(ctx.seed))
        images, targets, lr = x[idx], y[idx], float(ev.lr_real)
    res = evaluate(images, targets, lr)
    out.update(acc=res["acc_mean"], acc_std=res["acc_std"], eval_lr=lr)
    # same-evaluation controls (DD-Ranking): other sets trained exactly as the distilled one, at its learnt lr
    for name in extra:
        if name not in sets:
            idx = real_subset(name, x, y, datm.ipc, int(ctx.seed))
            sets[name] = (x[idx], y[idx])
        out[f"{name}/acc"] = evaluate(*sets[name], lr)["acc_mean"]
    ctx.log(out)
    return out


def real_subset(kind: str, x: torch.Tensor, y: torch.Tensor, ipc: int, seed: int) -> torch.Tensor:
    """Indices of a real subset: `random` (class-balanced, the seed's generator's first draw: the
    same images as MTT's random init) or `kmeans` (floor kmeans_coreset on pixels)."""
    if kind == "random":
        return class_balanced_indices(y, ipc, torch.Generator().manual_seed(seed))
    return kmeans_coreset(x.flatten(1), y, ipc, seed=seed)


__all__ = ["DATM", "EXTRA_EVALS", "ROWS", "build", "correct_logit_average", "distill_splits", "expert_logits",
           "matching_loss", "real_subset", "run", "sample_start_epoch", "select_correct", "start_epoch_bound"]
