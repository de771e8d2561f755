"""KRR-ST: Self-Supervised Dataset Distillation for Transfer Learning (Lee et al., ICLR 2024).
See README.md. Built on the dataset distillation floor (common/distill) and common.ssl."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from hydra.utils import instantiate

from common.config import UserError
from common.distill import ConvNet, class_balanced_indices, kmeans_coreset
from common.eval import linear_probe
from methods.krr_st.data import source_images, target_representations, target_task, to_student
from methods.krr_st.loss import krr_outer_loss
from methods.krr_st.pool import ModelPool
from methods.krr_st.train import accuracy, batches, distill, finetune, pretrain

ROWS = ("krr_st", "random_target", "krr_sup", "random_sup", "kmeans_sup", "no_pretrain", "full_target")


def build(cfg, head_dim: int | None = None) -> ConvNet:
    """A student from the config alone: ConvNet at the students' side, head width method.head_dim
    (the dim of g) unless given (the source classes, for the supervised rows)."""
    head = int(cfg.method.head_dim) if head_dim is None else int(head_dim)
    return instantiate(cfg.method.network, in_chans=cfg.dataset.in_chans, num_classes=head,
                       img_size=int(cfg.method.student_side))


def _generator(seed: int, stream: int) -> torch.Generator:
    """Independent streams of one run seed: 0 the source subset, 1 distillation, 2 pretraining,
    3 the target labels, 4 fine-tuning (every row of a seed shares 0, 3 and 4)."""
    return torch.Generator().manual_seed(int(seed) * 100 + stream)


def prepare(cfg, ctx) -> dict:
    """Everything every row reads: source images (student side, and uint8 for g), their labels,
    g(x) of every source image (cached), and the target task at the student side."""
    m = cfg.method
    x_u8, y_src = source_images(cfg.dataset)
    reps = target_representations(cfg, ctx, x_u8)
    (xp, yp), (xe, ye) = target_task(m.target.name, cfg.dataset.root, bool(cfg.dataset.download),
                                     int(m.student_side), m.target.eval_on, int(m.target.val_size))
    return {"x": to_student(x_u8, int(m.student_side)), "y": y_src.long(), "reps": reps,
            "target_pool": (xp, yp), "target_eval": (xe, ye)}


def pretrained_student(cfg, ctx, row: str, d: dict, seed: int, log=None) -> tuple[torch.nn.Module, dict]:
    """The row's pretrained student (a fresh one for no_pretrain) and its distillation stats."""
    m = cfg.method
    if row not in ROWS:
        raise UserError(f"method.row must be one of {', '.join(ROWS)}, got '{row}'", exit_code=2)
    x, y, reps = d["x"], d["y"], d["reps"]
    n, num = len(x), int(m.num_images)
    if num > n:
        raise ValueError(f"num_images m = {num} is larger than the source set ({n} images)")
    num_classes = int(y.max()) + 1
    supervised = row in ("krr_sup", "random_sup", "kmeans_sup")
    make_model = lambda: build(cfg, num_classes if supervised else None)   # noqa: E731
    if row in ("krr_st", "random_target", "full_target") and int(m.head_dim) != reps.shape[1]:
        raise ValueError(f"row '{row}': the students' head width method.head_dim = {int(m.head_dim)} differs from "
                         f"the dim of g, {reps.shape[1]}")
    stats: dict[str, float] = {}
    student = make_model()
    if row == "no_pretrain":
        return student, stats
    p = m.pretrain
    if row == "full_target":
        xs, ts = x, reps
    elif row in ("krr_st", "random_target"):
        idx = torch.randperm(n, generator=_generator(seed, 0))[:num]
        xs, ts = x[idx], reps[idx]
    else:
        if num % num_classes:
            raise ValueError(f"num_images m = {num} must be a multiple of the {num_classes} source classes")
        if row == "kmeans_sup":
            idx = kmeans_coreset(x.flatten(1), y, num // num_classes, seed=int(seed))
        else:
            idx = class_balanced_indices(y, num // num_classes, _generator(seed, 0))
        xs, ts = x[idx], y[idx]
        if row == "krr_sup":
            ts = F.one_hot(ts, num_classes).float()
    if row in ("krr_st", "krr_sup"):
        dc = m.distill
        targets_all = reps if row == "krr_st" else F.one_hot(y, num_classes).float()
        last: dict = {}

        def log_last(r: dict, step: int) -> None:
            last.update(r)
            if log is not None:
                log(r, step)

        syn = distill(make_model, xs, ts, x, targets_all, int(dc.steps), int(dc.batch_size), float(dc.lr),
                      int(dc.num_models), int(dc.online_steps), _generator(seed, 1), float(dc.rel_ridge),
                      float(dc.online_lr), float(dc.online_momentum), float(dc.online_weight_decay),
                      float(dc.end_factor), log=log_last)
        if last:
            stats["outer_loss"] = float(last["outer_loss"])
        stats["image_shift"] = float((syn.images.detach() - xs).norm() / xs.norm())
        stats["target_shift"] = float((syn.targets.detach() - ts).norm() / ts.norm())
        xs, ts = syn.images.detach(), syn.targets.detach()
    o = p.mse if ts.is_floating_point() else p.ce
    pretrain(student, xs, ts, int(p.steps), int(p.batch_size), float(o.lr), float(o.momentum), float(o.weight_decay),
             _generator(seed, 2))
    return student, stats


def transfer_metrics(cfg, student: torch.nn.Module, d: dict, seed: int, labels_per_class: int) -> dict[str, float]:
    """probe_acc: linear probe on the frozen student's embed features of the k labelled target
    images per class; finetune_acc: a copy with a new head fine-tuned on them (CE, SGD, cosine)."""
    m = cfg.method
    (xp, yp), (xe, ye) = d["target_pool"], d["target_eval"]
    idx = class_balanced_indices(yp, int(labels_per_class), _generator(seed, 3))
    xl, yl = xp[idx], yp[idx]
    student.eval()
    with torch.no_grad():
        ftr, fte = student.embed(xl), student.embed(xe)
    probe = linear_probe(ftr, yl, fte, ye, max_iter=int(m.probe.max_iter), C=float(m.probe.C), seed=int(seed))
    ft = m.finetune
    model = finetune(copy.deepcopy(student), xl, yl, int(yp.max()) + 1, int(ft.steps), int(ft.batch_size),
                     float(ft.lr), float(ft.momentum), float(ft.weight_decay), _generator(seed, 4))
    return {"probe_acc": probe, "finetune_acc": accuracy(model, xe, ye)}


def run(cfg, ctx) -> dict[str, float]:
    """Target encoder (cached ctx.trainer stage), then for each row of method.rows: its set
    (distilled or real), pretraining and transfer to the target task: finetune_acc and probe_acc
    (%), named `<row>/<metric>` when there are several rows (one run reports every row of a seed:
    they share the source subset, the target labels and g)."""
    m = cfg.method
    seed = int(ctx.seed)
    rows = list(m.rows)
    if not rows or len(set(rows)) != len(rows):
        raise UserError(f"method.rows must be a non-empty list of distinct rows, got {rows}", exit_code=2)
    d = prepare(cfg, ctx)
    every = max(1, int(m.log_every))
    out: dict[str, float] = {}
    for row in rows:
        name = "" if len(rows) == 1 else f"{row}/"
        log = lambda r, step: ctx.log({name + k: v for k, v in r.items()}, step=step) if step % every == 0 else None   # noqa: E731
        torch.manual_seed(seed)       # every row's networks start from the same global RNG state
        student, stats = pretrained_student(cfg, ctx, row, d, seed, log=log)
        torch.manual_seed(seed)
        metrics = dict(stats, **transfer_metrics(cfg, student, d, seed, int(m.target.labels_per_class)))
        out.update({name + k: v for k, v in metrics.items()})
    return out


__all__ = ["ModelPool", "ROWS", "accuracy", "batches", "build", "distill", "finetune", "krr_outer_loss", "prepare",
           "pretrain", "pretrained_student", "run", "transfer_metrics"]
