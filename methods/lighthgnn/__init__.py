"""LightHGNN: distilling hypergraph neural networks into MLPs (ICLR 2024). See README.md."""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from common import runner
from common.data.hypergraphs import Hypergraph, load_hypergraph, random_split, synthetic_hypergraph
from methods.lighthgnn.loss import hyperedge_kd_loss, kd_loss, lighthgnn_loss, reliability
from methods.lighthgnn.metrics import accuracy, topology_score
from methods.lighthgnn.model import HGNN, HGNNSmoothing, MLPStudent, with_self_loops
from methods.lighthgnn.train import fit


def load(ds) -> Hypergraph:
    if ds.name == "synthetic":
        return synthetic_hypergraph(ds.num_vertices, ds.num_classes, ds.feature_dim, seed=ds.generator_seed)
    return load_hypergraph(ds.name, ds.root, ds.download)


def incidence_pairs(edges: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    members = torch.tensor([v for e in edges for v in e])
    edge_of = torch.tensor([j for j, e in enumerate(edges) for _ in e])
    return members, edge_of


def holdout(hg: Hypergraph, test_idx: torch.Tensor, share: float, seed: int):
    """(held-out vertices, remaining test vertices, vertices seen in training, hyperedges without
    the held-out vertices). share = 0 is the transductive setting."""
    gen = torch.Generator().manual_seed(seed + 1)
    perm = test_idx[torch.randperm(len(test_idx), generator=gen)]
    cut = int(round(share * len(test_idx)))
    held, rest = perm[:cut], perm[cut:].sort().values
    is_held = torch.zeros(hg.num_vertices, dtype=torch.bool)
    is_held[held] = True
    edges = [kept for e in hg.edges if (kept := [v for v in e if not is_held[v]])]
    return held, rest, torch.nonzero(~is_held).flatten(), edges


def run(cfg) -> dict[str, float]:
    """Teacher HGNN, then three students on the same split: MLP (labels only), LightHGNN (+ soft
    labels), LightHGNN+ (+ reliable hyperedge soft labels). Test accuracy at the best
    validation epoch and the topology score of each."""
    ctx = runner.start(cfg)
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    m, hg = cfg.method, load(cfg.dataset)
    y = hg.labels
    # sparse features make every first layer ~3x cheaper; noise for reliability needs them dense
    x_dense = hg.features
    x = x_dense.to_sparse_csr() if m.sparse_features else x_dense
    split = random_split(y, m.train_per_class, m.val_per_class, cfg.seed)
    train_idx, val_idx, test_idx = split["train"], split["val"], split["test"]
    # production (inductive) setting: a share of the test vertices is absent from training,
    # hypergraph included; the students then see only their features
    held, test_idx, seen, train_hyperedges = holdout(hg, test_idx, m.inductive_holdout, cfg.seed)
    edges = with_self_loops(train_hyperedges, hg.num_vertices)
    members, edge_of = incidence_pairs(edges)
    num_edges = len(edges)
    smoothing = HGNNSmoothing(train_hyperedges, hg.num_vertices)
    opt = dict(epochs=m.epochs, lr=m.lr, weight_decay=m.weight_decay)

    def log(prefix):
        return lambda row: ctx.logger.log({f"{prefix}/{k}": v for k, v in row.items() if k != "epoch"}, row["epoch"])

    teacher = HGNN(x_dense.shape[1], m.teacher_hidden, hg.num_classes, m.dropout, smoothing)
    teacher, _ = fit(teacher, lambda: teacher(x), lambda out, _: F.cross_entropy(out[train_idx], y[train_idx]),
                     y, val_idx, log=log("hgnn"), **opt)
    with torch.no_grad():
        t_logits = teacher(x)
        noisy = teacher(x_dense * (1 + m.noise_std * torch.randn_like(x_dense)))
    rho = reliability(t_logits, noisy, members, edge_of, num_edges)
    gen = torch.Generator().manual_seed(cfg.seed)

    def student_loss(kind):
        def loss(out, epoch):
            if kind == "mlp":
                return F.cross_entropy(out[train_idx], y[train_idx])
            total = lighthgnn_loss(out, t_logits, y, train_idx, m.ce_weight, m.temperature, kd_idx=seen)
            if kind == "lighthgnn_plus":  # hyperedges resampled every epoch, kept with probability ρ_e
                sampled = torch.nonzero(torch.bernoulli(rho, generator=gen)).flatten()
                if len(sampled):
                    total = total + m.hyperedge_weight * hyperedge_kd_loss(
                        out, t_logits, members, edge_of, num_edges, sampled, m.temperature)
            return total
        return loss

    metrics = {"hgnn_acc": accuracy(t_logits, y, test_idx),
               "hgnn_topology": topology_score(t_logits.softmax(-1), members, edge_of, num_edges),
               "mean_reliability": float(rho.mean())}
    if len(held):  # HGNN needs the full hypergraph, new vertices included, at inference
        teacher.smoothing = HGNNSmoothing(hg.edges, hg.num_vertices)
        with torch.no_grad():
            metrics["hgnn_acc_inductive"] = accuracy(teacher(x), y, held)
    for kind in ("mlp", "lighthgnn", "lighthgnn_plus"):
        student = MLPStudent(x_dense.shape[1], hg.num_classes, m.student_hidden, m.dropout)
        student, _ = fit(student, lambda: student(x), student_loss(kind), y, val_idx, log=log(kind), **opt)
        with torch.no_grad():
            s_logits = student(x)
        metrics[f"{kind}_acc"] = accuracy(s_logits, y, test_idx)
        metrics[f"{kind}_topology"] = topology_score(s_logits.softmax(-1), members, edge_of, num_edges)
        if len(held):
            metrics[f"{kind}_acc_inductive"] = accuracy(s_logits, y, held)
    metrics["kd_agreement"] = float(kd_loss(s_logits, t_logits, 1.0))
    ctx.logger.log(metrics, m.epochs)
    ctx.logger.close()
    return metrics


__all__ = ["HGNN", "HGNNSmoothing", "MLPStudent", "holdout", "kd_loss", "lighthgnn_loss", "hyperedge_kd_loss",
           "reliability", "topology_score", "run"]
