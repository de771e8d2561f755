"""LightHGNN: distilling hypergraph neural networks into MLPs (ICLR 2024). See README.md."""
from __future__ import annotations

import warnings

import torch
from hydra.utils import instantiate
from torch import nn

from common.data.hypergraphs import random_split
from methods.lighthgnn.data import Observed, incidence_pairs, load, normalise_features, observe, unique_hyperedges
from common.config import UserError
from methods.lighthgnn.loss import hyperedge_kd_loss, kd_loss, lighthgnn_loss, official_kd_loss, reliability
from methods.lighthgnn.metrics import topology_score
from methods.lighthgnn.model import HGNN, Distillation, HGNNSmoothing, MLPStudent, with_self_loops
from methods.lighthgnn.stages import Problem, acc, fit_student, fit_teacher

STUDENTS = {"mlp": dict(ce_weight=1.0, hyperedge_kd=False),   # labels only
            "lighthgnn": dict(hyperedge_kd=False),             # + soft labels (the paper's KL)
            "lighthgnn_plus": dict(hyperedge_kd=True),         # + reliable hyperedge soft labels
            "lighthgnn_logtarget": dict(hyperedge_kd=False, kd="official")}   # the official code's KD


def build(cfg) -> nn.ModuleDict:
    """Teacher and student from the config alone (feature and class counts from `dataset`)."""
    dims = dict(in_dim=cfg.dataset.feature_dim, num_classes=cfg.dataset.num_classes)
    return nn.ModuleDict({"teacher": instantiate(cfg.method.teacher, **dims),
                          "student": instantiate(cfg.method.student, **dims)})


def problem(obs: Observed, sparse_features: bool, impl: str, device) -> Problem:
    x = obs.x.to(device)
    if sparse_features:  # bag-of-words features are ~1% non-zero: the first layers ~3x cheaper
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            x = x.to_sparse_csr()
    members, edge_of = incidence_pairs(obs.edges)
    return Problem(x, obs.labels.to(device), obs.train.to(device), obs.val.to(device), obs.test.to(device),
                   HGNNSmoothing(obs.edges, obs.num_vertices, impl).to(device), members.to(device),
                   edge_of.to(device), len(obs.edges))


def run(cfg, ctx) -> dict[str, float]:
    """Teacher HGNN, then the students of `method.students` on the same split: MLP (labels only),
    LightHGNN (soft labels), LightHGNN+ (+ reliable hyperedge soft labels), LightHGNN with the
    official code's log_target KD. Per model `<model>/acc` (test accuracy at the best validation
    epoch) and `<model>/topology` (a table row per model); in the production setting
    (method.holdout_fraction > 0) also `<model>/acc_inductive` (held-out vertices) and
    `<model>/acc_production` (all test vertices)."""
    m, dev = cfg.method, ctx.device
    unknown = sorted(set(m.students) - set(STUDENTS))
    if unknown or not len(m.students):
        raise UserError(f"method.students must be a non-empty list of {', '.join(STUDENTS)}; got {list(m.students)}",
                        exit_code=2)
    hg = normalise_features(load(cfg.dataset), m.feature_norm)
    split = random_split(hg.labels, m.train_per_class, m.val_per_class, ctx.seed)
    obs, held = observe(hg, split, m.holdout_fraction, ctx.seed)
    p = problem(obs, m.sparse_features, ctx.hw.kernels, dev)
    x_all, y_all, held, test_all = hg.features.to(dev), hg.labels.to(dev), held.to(dev), split["test"].to(dev)

    def unseen(predict_all):   # the held-out vertices exist only here, after training
        if not len(held):
            return {}
        logits = predict_all()
        return {"acc_inductive": acc(logits, y_all, held), "acc_production": acc(logits, y_all, test_all)}

    models = build(cfg)
    teacher = models["teacher"].to(dev)
    full = HGNNSmoothing(unique_hyperedges(hg.edges), hg.num_vertices, ctx.hw.kernels).to(dev) if len(held) else None
    metrics = fit_teacher(ctx, teacher, p, lambda t: unseen(lambda: t(x_all, full)))
    with torch.no_grad():
        teacher.eval()
        t_logits = teacher(p.x, p.smoothing)
        dense = obs.x.to(dev)   # the noise X ⊙ (1 + σε) needs dense features
        noisy = teacher(dense * (1 + m.noise_std * torch.randn_like(dense)), p.smoothing)
    rho = reliability(t_logits, noisy, p.members, p.edge_of, p.num_edges)
    metrics["hgnn/mean_reliability"] = float(rho.mean())
    for stage in (s for s in STUDENTS if s in m.students):   # a fixed order: each student draws its own initialisation
        options = STUDENTS[stage]
        student = models["student"] if stage == "mlp" else instantiate(
            cfg.method.student, in_dim=cfg.dataset.feature_dim, num_classes=cfg.dataset.num_classes)
        objective = instantiate(cfg.method.distillation, student=student, **options).to(dev)
        metrics |= fit_student(ctx, stage, objective, p, t_logits, rho, lambda s: unseen(lambda: s(x_all)))
    return metrics


__all__ = ["HGNN", "HGNNSmoothing", "MLPStudent", "Distillation", "Observed", "build", "hyperedge_kd_loss",
           "kd_loss", "lighthgnn_loss", "observe", "official_kd_loss", "reliability", "run", "topology_score", "with_self_loops"]
