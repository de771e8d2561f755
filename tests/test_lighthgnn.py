"""LightHGNN: the HGNN convolution against a dense reference, the KD loss by hand, reliability
sampling statistics, the safe unpickler and the loaders."""
import math
import pickle

import pytest
import torch

from common.config import UserError
from common.data import safe_pickle
from common.data.hypergraphs import load_hypergraph, random_split, synthetic_hypergraph
from methods.lighthgnn import HGNNSmoothing, hyperedge_kd_loss, kd_loss, lighthgnn_loss, reliability, topology_score
from methods.lighthgnn.model import with_self_loops

EDGES = [[0, 1, 2], [2, 3], [1, 3, 4]]   # vertex 5 is in no hyperedge -> self-loop


def dense_hgnn_operator(edges, n):
    edges = with_self_loops(edges, n)
    H = torch.zeros(n, len(edges), dtype=torch.float64)
    for j, e in enumerate(edges):
        H[e, j] = 1.0
    dv, de = H.sum(1), H.sum(0)
    return torch.diag(dv ** -0.5) @ H @ torch.diag(1 / de) @ H.T @ torch.diag(dv ** -0.5)


def test_smoothing_matches_dense_formula():
    x = torch.randn(6, 3, dtype=torch.float64)
    op = HGNNSmoothing(EDGES, 6).double()
    torch.testing.assert_close(op(x), dense_hgnn_operator(EDGES, 6) @ x)


def test_isolated_vertex_gets_self_loop():
    assert with_self_loops(EDGES, 6)[-1] == [5]
    x = torch.randn(6, 2, dtype=torch.float64)
    torch.testing.assert_close(HGNNSmoothing(EDGES, 6).double()(x)[5], x[5])   # a self-loop leaves it alone


def test_kd_loss_by_hand():
    zs, zt, tau = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0]]), 2.0
    ps = torch.softmax(zs / tau, -1)[0]
    pt = torch.softmax(zt / tau, -1)[0]
    expected = tau ** 2 * sum(pt[k] * math.log(pt[k] / ps[k]) for k in range(2))
    assert kd_loss(zs, zt, tau).item() == pytest.approx(float(expected), rel=1e-6)
    assert kd_loss(zt, zt, tau).item() == pytest.approx(0.0, abs=1e-7)


def test_lighthgnn_loss_mixes_ce_and_kd():
    zs, zt = torch.randn(5, 3), torch.randn(5, 3)
    y, idx = torch.tensor([0, 1, 2, 0, 1]), torch.tensor([0, 2])
    ce = torch.nn.functional.cross_entropy(zs[idx], y[idx])
    assert lighthgnn_loss(zs, zt, y, idx, 0.3, 1.5).item() == pytest.approx(
        (0.3 * ce + 0.7 * kd_loss(zs, zt, 1.5)).item(), rel=1e-6)


def incidence(edges):
    members = torch.tensor([v for e in edges for v in e])
    edge_of = torch.tensor([j for j, e in enumerate(edges) for _ in e])
    return members, edge_of


def test_reliability_range_and_most_changed_edge_is_zero():
    members, edge_of = incidence(EDGES)
    clean = torch.randn(6, 4)
    noisy = clean.clone()
    noisy[4] += torch.tensor([5.0, 0, 0, 0])   # only hyperedge 2 contains vertex 4
    rho = reliability(clean, noisy, members, edge_of, 3)
    assert rho[2].item() == pytest.approx(0.0) and rho[0].item() == pytest.approx(1.0)
    assert ((rho >= 0) & (rho <= 1)).all()


def test_bernoulli_sampling_frequency_matches_reliability():
    rho = torch.tensor([0.1, 0.5, 0.9])
    gen = torch.Generator().manual_seed(0)
    trials = 4000
    freq = torch.stack([torch.bernoulli(rho, generator=gen) for _ in range(trials)]).mean(0)
    sd = (rho * (1 - rho) / trials).sqrt()
    assert ((freq - rho).abs() < 4 * sd).all()


def test_hyperedge_kd_zero_when_student_equals_teacher():
    members, edge_of = incidence(EDGES)
    z = torch.randn(6, 3)
    assert hyperedge_kd_loss(z, z, members, edge_of, 3, torch.tensor([0, 2]), 1.0).item() == pytest.approx(0, abs=1e-6)
    assert hyperedge_kd_loss(torch.randn(6, 3), z, members, edge_of, 3, torch.tensor([0, 2]), 1.0).item() > 0


def test_topology_score_by_hand():
    members, edge_of = incidence([[0, 1], [1, 2]])
    h = torch.tensor([[0.0, 0.0], [2.0, 0.0], [2.0, 0.0]])
    assert topology_score(h, members, edge_of, 2) == pytest.approx((1.0 + 0.0) / 2)


def test_safe_unpickler_refuses_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    (tmp_path / "evil.pickle").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(safe_pickle.RefusedPickle, match="builtins.print"):
        safe_pickle.load(tmp_path / "evil.pickle")
    import numpy as np
    import scipy.sparse as sp
    (tmp_path / "ok.pickle").write_bytes(pickle.dumps({"a": np.arange(3), "m": sp.csr_matrix(np.eye(2))}))
    loaded = safe_pickle.load(tmp_path / "ok.pickle")
    assert loaded["a"].tolist() == [0, 1, 2] and loaded["m"].nnz == 2


def test_real_hypergraph_loads_and_verifies():
    try:
        hg = load_hypergraph("cocitation_cora", root="/nonexistent")
    except UserError as err:
        pytest.skip(f"shared hypergraph data not here: {err}")
    assert hg.num_vertices == 2708 and hg.features.shape == (2708, 1433) and hg.num_classes == 7
    assert len(hg.edges) == 1579


def test_random_split_sizes_and_disjoint():
    hg = synthetic_hypergraph(600, num_classes=3, seed=1)
    s = random_split(hg.labels, 20, 30, seed=0)
    assert len(s["train"]) == 60 and len(s["val"]) == 90 and len(s["test"]) == 600 - 150
    assert len(set(s["train"].tolist()) | set(s["val"].tolist()) | set(s["test"].tolist())) == 600
    assert all(2 <= len(e) <= 8 for e in hg.edges) and min(len(e) for e in hg.edges) >= 3


def test_production_holdout_removes_vertices_from_training_hypergraph():
    from methods.lighthgnn import holdout

    hg = synthetic_hypergraph(500, num_classes=3, seed=2)
    split = random_split(hg.labels, 10, 10, seed=0)
    held, rest, seen, edges = holdout(hg, split["test"], 0.9, seed=0)
    assert len(held) == round(0.9 * len(split["test"])) and len(held) + len(rest) == len(split["test"])
    held_set = set(held.tolist())
    assert not any(v in held_set for e in edges for v in e)           # absent from the hypergraph
    assert set(seen.tolist()) == set(range(500)) - held_set            # and from the KD targets
    assert holdout(hg, split["test"], 0.0, seed=0)[0].numel() == 0     # 0 = transductive
