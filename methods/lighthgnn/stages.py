"""The run's stages, each a named stage of the shared Trainer (`trainer: full_batch`: a step is
an epoch over the whole observed hypergraph) with the weights of the best validation accuracy
kept (`BestOnValidation`, as the official loops): the HGNN teacher, then one student per
objective (MLP, LightHGNN, LightHGNN+)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from common import tasks
from common.callbacks import BestOnValidation
from common.eval import accuracy
from methods.lighthgnn.metrics import topology_score
from methods.lighthgnn.model import HGNN, Distillation, HGNNSmoothing


@dataclass
class Problem:
    """The observed vertices on the run's device (data.Observed, with its operator and incidence)."""
    x: torch.Tensor             # (V, d) dense, or sparse CSR for the first layers
    labels: torch.Tensor        # (V,)
    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor
    smoothing: HGNNSmoothing    # the HGNN operator of the observed hypergraph
    members: torch.Tensor       # (pairs,) incidence of the same hypergraph
    edge_of: torch.Tensor       # (pairs,)
    num_edges: int


def acc(logits: torch.Tensor, labels: torch.Tensor, idx: torch.Tensor) -> float:
    return accuracy(logits[idx], labels[idx])


def _fit(ctx, stage: str, model: torch.nn.Module, selected: torch.nn.Module, batches: Callable[[int], dict],
         predict: Callable[[], torch.Tensor], evaluate: Callable[[torch.nn.Module], dict], labels, val) -> dict:
    """Train `model` (its training_step) as `stage`; keep `selected`'s weights of the best
    validation accuracy; return evaluate(...) and the stage's last training loss as `<stage>/<metric>`
    (a table row per stage)."""
    best = BestOnValidation(selected, "val_acc")
    metrics = tasks.fit_and_evaluate(ctx, model, batches, evaluate, stage=stage, callbacks=[best],
                                     eval_fn=lambda m, step: {"val_acc": acc(predict(), labels, val)})
    metrics["best_step"] = best.best_step
    return {f"{stage}/{k}": v for k, v in metrics.items()}


def fit_teacher(ctx, teacher: HGNN, p: Problem, extra_metrics: Callable[[HGNN], dict]) -> dict:
    """Cross-entropy on the labelled vertices, through the observed hypergraph."""
    batch = {"x": p.x, "smoothing": p.smoothing, "labels": p.labels, "train": p.train}

    def evaluate(model):
        return {"acc": acc(model(p.x, p.smoothing), p.labels, p.test),
                "topology": topology_score(model.embed(p.x, p.smoothing), p.members, p.edge_of, p.num_edges),
                **extra_metrics(model)}

    return _fit(ctx, "hgnn", teacher, teacher, lambda step: batch, lambda: teacher(p.x, p.smoothing), evaluate,
                p.labels, p.val)


def fit_student(ctx, stage: str, objective: Distillation, p: Problem, teacher_logits: torch.Tensor,
                reliability: torch.Tensor, extra_metrics: Callable[[torch.nn.Module], dict]) -> dict:
    """The student by `objective`; LightHGNN+ keeps hyperedge e with probability ρ_e at every
    step (the official Bernoulli draw per epoch), drawn from (seed, step) so that a resumed run
    draws the same hyperedges."""
    student = objective.student
    base = {"x": p.x, "labels": p.labels, "train": p.train, "teacher_logits": teacher_logits,
            "members": p.members, "edge_of": p.edge_of, "num_edges": p.num_edges, "sampled": None}

    def batches(step: int) -> dict:
        if not objective.hyperedge_kd:
            return base
        gen = torch.Generator().manual_seed(1_000_003 * ctx.seed + step)
        keep = torch.bernoulli(reliability.cpu(), generator=gen)                 # (E,)
        return {**base, "sampled": torch.nonzero(keep).flatten().to(p.x.device)}

    def evaluate(model):
        return {"acc": acc(student(p.x), p.labels, p.test),
                "topology": topology_score(student.embed(p.x), p.members, p.edge_of, p.num_edges),
                **extra_metrics(student)}

    return _fit(ctx, stage, objective, student, batches, lambda: student(p.x), evaluate, p.labels, p.val)
