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

ROWS = ("krr_st", "random_target", "krr_sup", "random_sup", "kmeans_sup", "no_pretrain", "full_target",
        "perturbed_target", "shuffled_target")
# rows pretrained by MSE on g's representations of (some of) the source images
_REPR_ROWS = ("krr_st", "random_target", "full_target", "perturbed_target", "shuffled_target")


def build(cfg, head_dim: int | None = None) -> ConvNet:
    """A student from the config alone: ConvNet at the students' side, head width method.head_dim
    (the dim of g) unless given (the source classes, for the supervised rows)."""
    head = int(cfg.method.head_dim) if head_dim is None else int(head_dim)
    return instantiate(cfg.method.network, in_chans=cfg.dataset.in_chans, num_classes=head,
                       img_size=int(cfg.method.student_side))


def _generator(seed: int, stream: int) -> torch.Generator:
    """Independent streams of one run seed: 0 the source subset, 1 distillation, 2 pretraining,
    3 the target labels, 4 fine-tuning (every row of a seed shares 0, 3 and 4), 5 the controls'
    noise and permutation."""
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
    if row in _REPR_ROWS and int(m.head_dim) != reps.shape[1]:
        raise ValueError(f"row '{row}': the students' head width method.head_dim = {int(m.head_dim)} differs from "
                         f"the dim of g, {reps.shape[1]}")
    stats: dict[str, float] = {}
    student = make_model()
    if row == "no_pretrain":
        return student, stats
    p = m.pretrain
    if row == "full_target":
        xs, ts = x, reps
    elif row in ("krr_st", "random_target", "perturbed_target", "shuffled_target"):
        idx = torch.randperm(n, generator=_generator(seed, 0))[:num]
        xs, ts = x[idx], reps[idx]
        if row == "perturbed_target":
            xs, ts = perturb_like(xs, ts, d, _generator(seed, 5))
        elif row == "shuffled_target":
            ts = ts[derangement(num, _generator(seed, 5))]
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
        if row == "krr_st":      # the size of the distillation's move, for perturbed_target
            d["krr_st_shift"] = (float((syn.images.detach() - xs).norm()), float((syn.targets.detach() - ts).norm()))
        xs, ts = syn.images.detach(), syn.targets.detach()
    # the official optimiser of each row's loss: MSE on representations (pretrain_krr_st.py), CE on
    # labels (pretrain_dc.py), MSE on learnt labels (KIP/FRePo, pretrain_frepo.py)
    o = p.ce if not ts.is_floating_point() else (p.labels if row == "krr_sup" else p.mse)
    pretrain(student, xs, ts, int(p.steps), int(p.batch_size), float(o.lr), float(o.get("momentum", 0.0)),
             float(o.weight_decay), _generator(seed, 2), optimizer=str(o.get("optimizer", "sgd")),
             schedule=str(o.get("schedule", "constant")), warmup_steps=int(o.get("warmup_steps", 0)))
    return student, stats


def perturb_like(xs: torch.Tensor, ts: torch.Tensor, d: dict, generator: torch.Generator
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The norm-matched random move (row perturbed_target): X_s + e_x, Y_s + e_y with Gaussian e_x,
    e_y scaled to the Frobenius norms of krr_st's own moves ||X_s' - X_s||, ||Y_s' - Y_s|| (this
    seed's, d["krr_st_shift"]): the same amount of movement in a random direction."""
    if "krr_st_shift" not in d:
        raise UserError("row perturbed_target needs krr_st before it in method.rows (it matches krr_st's move)",
                        exit_code=2)
    dx, dy = d["krr_st_shift"]
    ex = torch.randn(xs.shape, generator=generator, dtype=xs.dtype)
    ey = torch.randn(ts.shape, generator=generator, dtype=ts.dtype)
    return xs + ex * (dx / ex.norm()), ts + ey * (dy / ey.norm())


def derangement(m: int, generator: torch.Generator) -> torch.Tensor:
    """A permutation with no fixed point (m >= 2): image order[i] takes the target of order[i + 1]
    (row shuffled_target: g's representations, each on the wrong image)."""
    if m < 2:
        raise ValueError(f"a derangement needs m >= 2, got {m}")
    order = torch.randperm(m, generator=generator)
    perm = torch.empty(m, dtype=torch.long)
    perm[order] = order.roll(-1)
    return perm


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


__all__ = ["ModelPool", "ROWS", "accuracy", "batches", "build", "derangement", "distill", "finetune", "krr_outer_loss",
           "perturb_like", "prepare", "pretrain", "pretrained_student", "run", "transfer_metrics"]
