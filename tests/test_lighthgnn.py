"""LightHGNN: the HGNN operator against the dense formula (and the Triton segment sum against it),
every loss and score against the official expression or a hand loop, the production split against
the official sub_hypergraph, a run in which held-out vertices are poisoned, the loaders."""
import math
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from common.config import UserError
from common.data import safe_pickle
from common.data.hypergraphs import Hypergraph, load_hypergraph, random_split, synthetic_hypergraph
from methods.lighthgnn import (HGNN, Distillation, HGNNSmoothing, MLPStudent, hyperedge_kd_loss, kd_loss,
                               lighthgnn_loss, observe, official_kd_loss, reliability, topology_score,
                               with_self_loops)
from methods.lighthgnn.data import incidence_pairs, l1_normalise, normalise_features

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


def test_smoothing_on_the_triton_segment_sum_matches_torch_sparse():
    """hardware.kernels=triton runs the operator on common/kernels' segment sum (here in Triton's
    CPU interpreter): same values and input gradient as the torch.sparse path."""
    import os

    pytest.importorskip("triton")
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from common.kernels import interpreting

    if not torch.cuda.is_available() and not interpreting():
        pytest.skip("needs CUDA or TRITON_INTERPRET=1")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    edges = [[0, 1, 2], [2, 3], [1, 3, 4], [0, 4, 6, 7]]
    ref, tri = HGNNSmoothing(edges, 8).to(dev), HGNNSmoothing(edges, 8, impl="triton").to(dev)
    x = torch.randn(8, 5, device=dev, requires_grad=True)
    g = torch.randn(8, 5, device=dev)
    a, b = ref(x), tri(x)
    torch.testing.assert_close(b, a)
    torch.testing.assert_close(torch.autograd.grad(b, x, g)[0], torch.autograd.grad(a, x, g)[0])


def test_kd_loss_by_hand():
    zs, zt, tau = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0]]), 2.0
    ps = torch.softmax(zs / tau, -1)[0]
    pt = torch.softmax(zt / tau, -1)[0]
    expected = tau ** 2 * sum(pt[k] * math.log(pt[k] / ps[k]) for k in range(2))
    assert kd_loss(zs, zt, tau).item() == pytest.approx(float(expected), rel=1e-6)
    assert kd_loss(zt, zt, tau).item() == pytest.approx(0.0, abs=1e-7)


def test_official_kd_loss_is_the_log_target_reading_written_out():
    """The official train_stu's F.kl_div(log_softmax(z_s), softmax(z_t), batchmean, log_target=True)
    reads the teacher's probabilities p_t as log-probabilities: (1/V) Σ_v Σ_c e^{p_t}(p_t − log p_s)."""
    torch.manual_seed(0)
    zs, zt = torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    ps, pt = torch.softmax(zs, -1), torch.softmax(zt, -1)
    expected = sum(math.exp(float(pt[v, c])) * (float(pt[v, c]) - math.log(float(ps[v, c])))
                   for v in range(5) for c in range(4)) / 5
    assert official_kd_loss(zs, zt).item() == pytest.approx(expected, rel=1e-12)
    # its minimiser over the student is softmax(p_t), not p_t: the paper's KL is 0 at z_s = z_t, this is not minimal there
    flat = pt.log_softmax(-1)                      # logits of softmax(p_t)
    assert official_kd_loss(flat, zt).item() < official_kd_loss(zt, zt).item()
    z = flat.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(official_kd_loss(z, zt), z)
    assert g.abs().max().item() < 1e-12
    # and lighthgnn_loss / Distillation select it by kd="official"
    y, idx = torch.tensor([0, 1, 2, 3, 0]), torch.tensor([0, 1])
    loss, parts = lighthgnn_loss(zs, zt, y, idx, 0.0, 1.0, kd="official")
    assert loss.item() == pytest.approx(expected, rel=1e-12) and set(parts) == {"kd"}
    with pytest.raises(ValueError, match="kd"):
        lighthgnn_loss(zs, zt, y, idx, 0.0, 1.0, kd="log_target")
    with pytest.raises(ValueError, match="kd"):
        Distillation(MLPStudent(4, 3, hidden=8), kd="official_kd")


def kl_by_hand(p, q):
    return sum(float(p[k]) * math.log(float(p[k]) / float(q[k])) for k in range(len(p)))


def test_lighthgnn_loss_is_ce_plus_one_minus_lambda_times_kd_plus_hkd():
    """The official train_stu: loss = λ·CE + (1 − λ)·(KD + HKD), written out with loops."""
    torch.manual_seed(0)
    zs, zt = torch.randn(6, 3, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64)
    y, idx = torch.tensor([0, 1, 2, 0, 1, 2]), torch.tensor([0, 2])
    members, edge_of = incidence_pairs(with_self_loops(EDGES, 6))
    sampled, lam, tau = torch.tensor([0, 2, 3]), 0.3, 1.5
    ce = -sum(math.log(float(torch.softmax(zs[v], -1)[y[v]])) for v in idx.tolist()) / len(idx)
    ps, pt = torch.softmax(zs / tau, -1), torch.softmax(zt / tau, -1)
    kd = tau ** 2 * sum(kl_by_hand(pt[v], ps[v]) for v in range(6)) / 6
    edges = with_self_loops(EDGES, 6)
    hkd = tau ** 2 * sum(kl_by_hand(pt[edges[e]].mean(0), ps[edges[e]].mean(0)) for e in sampled.tolist()) / 3
    loss, parts = lighthgnn_loss(zs, zt, y, idx, lam, tau, members, edge_of, len(edges), sampled)
    assert loss.item() == pytest.approx(lam * ce + (1 - lam) * (kd + hkd), rel=1e-9)
    assert parts["hkd"].item() == pytest.approx(hkd, rel=1e-9)
    no_hkd, parts = lighthgnn_loss(zs, zt, y, idx, lam, tau)
    assert no_hkd.item() == pytest.approx(lam * ce + (1 - lam) * kd, rel=1e-9) and "hkd" not in parts


def test_lambda_zero_is_pure_distillation_and_one_is_the_plain_mlp():
    zs, zt = torch.randn(5, 3), torch.randn(5, 3)
    idx = torch.tensor([0, 2])
    a, _ = lighthgnn_loss(zs, zt, torch.tensor([0, 1, 2, 0, 1]), idx, 0.0, 1.0)
    b, _ = lighthgnn_loss(zs, zt, torch.tensor([2, 2, 0, 1, 1]), idx, 0.0, 1.0)
    assert a.item() == b.item()                                        # labels play no part at λ = 0
    y = torch.tensor([0, 1, 2, 0, 1])
    c, parts = lighthgnn_loss(zs, torch.randn(5, 3), y, idx, 1.0, 1.0)
    assert c.item() == pytest.approx(F.cross_entropy(zs[idx], y[idx]).item()) and set(parts) == {"ce"}


def test_distillation_training_step_samples_hyperedges_only_for_lighthgnn_plus():
    torch.manual_seed(0)
    members, edge_of = incidence_pairs(with_self_loops(EDGES, 6))
    batch = {"x": torch.randn(6, 4), "labels": torch.tensor([0, 1, 2, 0, 1, 2]), "train": torch.tensor([0]),
             "teacher_logits": torch.randn(6, 3), "members": members, "edge_of": edge_of, "num_edges": 4,
             "sampled": torch.tensor([0, 1])}
    student = MLPStudent(4, 3, hidden=8).eval()
    _, plain = Distillation(student).training_step(batch)
    _, plus = Distillation(student, hyperedge_kd=True).training_step(batch)
    assert set(plain) == {"kd"} and set(plus) == {"kd", "hkd"}
    with pytest.raises(ValueError, match="ce_weight"):
        Distillation(student, ce_weight=1.5)


def official_entropy_delta(clean, noisy, edges):
    """HighOrderConstraint.__init__ of the official trans_train.py, with dhg's v2e(mean) as a loop."""
    def entropy_e(logits):
        pred = logits.softmax(-1)
        ent = -(pred * pred.log()).sum(1)
        ent[ent.isnan()] = 0
        return torch.stack([ent[e].mean() for e in edges])
    delta = (entropy_e(noisy) - entropy_e(clean)).abs()
    return 1 - delta / delta.max()


def test_reliability_is_the_official_expression():
    torch.manual_seed(1)
    edges = with_self_loops(EDGES, 6)
    members, edge_of = incidence_pairs(edges)
    clean, noisy = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
    rho = reliability(clean, noisy, members, edge_of, len(edges))
    torch.testing.assert_close(rho, official_entropy_delta(clean, noisy, edges))
    assert rho.min().item() == 0.0 and ((rho >= 0) & (rho <= 1)).all()


def test_bernoulli_sampling_frequency_matches_reliability():
    rho = torch.tensor([0.1, 0.5, 0.9])
    gen = torch.Generator().manual_seed(0)
    trials = 4000
    freq = torch.stack([torch.bernoulli(rho, generator=gen) for _ in range(trials)]).mean(0)
    sd = (rho * (1 - rho) / trials).sqrt()
    assert ((freq - rho).abs() < 4 * sd).all()


def test_hyperedge_kd_zero_when_student_equals_teacher():
    members, edge_of = incidence_pairs(EDGES)
    z = torch.randn(6, 3)
    assert hyperedge_kd_loss(z, z, members, edge_of, 3, torch.tensor([0, 2]), 1.0).item() == pytest.approx(0, abs=1e-6)
    assert hyperedge_kd_loss(torch.randn(6, 3), z, members, edge_of, 3, torch.tensor([0, 2]), 1.0).item() > 0


def official_topology_score(X, edges):
    """utils.ho_topology_score of the official code (dhg's v2e mean and nbr_v as lists)."""
    X_e = torch.stack([X[e].mean(0) for e in edges])
    return float(np.mean([np.mean([torch.norm(X_e[j] - X[v], p=2).item() for v in e]) for j, e in enumerate(edges)]))


def test_topology_score_is_the_official_one_and_taken_on_hidden_embeddings():
    members, edge_of = incidence_pairs([[0, 1], [1, 2]])
    h = torch.tensor([[0.0, 0.0], [2.0, 0.0], [2.0, 0.0]])
    assert topology_score(h, members, edge_of, 2) == pytest.approx((1.0 + 0.0) / 2)
    edges = with_self_loops(EDGES, 6)
    members, edge_of = incidence_pairs(edges)
    x = torch.randn(6, 10)
    teacher, student = HGNN(10, 3, hidden=7).eval(), MLPStudent(10, 3, hidden=9).eval()
    emb = teacher.embed(x, HGNNSmoothing(EDGES, 6))
    assert emb.shape == (6, 7) and student.embed(x).shape == (6, 9)    # the hidden layer, not the logits
    assert topology_score(emb, members, edge_of, len(edges)) == pytest.approx(official_topology_score(emb, edges), rel=1e-5)


def dhg_hyperedges(edges):
    """dhg.Hypergraph(num_v, e_list).e[0]: sorted vertex tuples, a repeated one merged into the first."""
    merged = {}
    for e in edges:
        merged.setdefault(tuple(sorted(e)), len(merged))
    return [list(e) for e in sorted(merged, key=merged.get)]


def official_sub_hypergraph(edges, n, obs_idx):
    """utils.sub_hypergraph + fix_iso_v of the official code (on a dhg.Hypergraph), written out."""
    v_map = {v: i for i, v in enumerate(obs_idx)}
    kept = [[v_map[v] for v in e if v in v_map] for e in dhg_hyperedges(edges)]
    return with_self_loops(dhg_hyperedges([e for e in kept if len(e) >= 1]), len(obs_idx))


def test_production_split_trains_on_the_observed_sub_hypergraph_only():
    hg = synthetic_hypergraph(500, num_classes=3, seed=2)
    hg.edges += [list(reversed(e)) for e in hg.edges[:20]]                  # repeated hyperedges merge
    split = random_split(hg.labels, 10, 10, seed=0)
    obs, held = observe(hg, split, 0.9, seed=0)
    assert len(held) == int(0.9 * len(split["test"])) and len(obs.test) + len(held) == len(split["test"])
    assert not set(held.tolist()) & set(obs.vertices.tolist())
    assert obs.vertices.tolist() == sorted(set(range(500)) - set(held.tolist()))
    torch.testing.assert_close(obs.x, hg.features[obs.vertices])
    assert obs.edges == official_sub_hypergraph(hg.edges, 500, obs.vertices.tolist())
    for part in ("train", "val"):
        assert obs.vertices[getattr(obs, part)].tolist() == split[part].tolist()
    transductive, none = observe(hg, split, 0.0, seed=0)
    assert none.numel() == 0 and transductive.num_vertices == 500
    assert transductive.edges == with_self_loops(dhg_hyperedges(hg.edges), 500)


def _run_with_held_out_features(compose_cfg, tmp_path, monkeypatch, fill: float) -> dict:
    import methods.lighthgnn as lighthgnn
    from common.runner import run_method

    cfg = compose_cfg(["experiment=lighthgnn_smoke", f"run_dir={tmp_path / str(fill)}", "logger=none"])
    ds = cfg.dataset
    hg = synthetic_hypergraph(ds.num_vertices, ds.num_classes, ds.feature_dim, seed=ds.generator_seed)
    split = random_split(hg.labels, cfg.method.train_per_class, cfg.method.val_per_class, cfg.seed)
    _, held = observe(hg, split, cfg.method.holdout_fraction, cfg.seed)
    assert len(held) > 0
    x = hg.features.clone()
    x[held] = fill
    monkeypatch.setattr(lighthgnn, "load", lambda _: Hypergraph(x, hg.labels, hg.edges))
    return run_method(cfg)


def test_held_out_vertices_never_reach_training(compose_cfg, tmp_path, monkeypatch):
    """Held-out features set to NaN: any feature, teacher output or BatchNorm statistic of a
    held-out vertex in training makes a loss, a weight or a metric NaN (or stops the run); and
    everything measured on observed vertices is bit-identical to a run with other held-out features."""
    nan = _run_with_held_out_features(compose_cfg, tmp_path, monkeypatch, float("nan"))
    big = _run_with_held_out_features(compose_cfg, tmp_path, monkeypatch, 1e3)
    seen = {k: v for k, v in nan.items() if not k.endswith(("_inductive", "_production"))}
    assert all(math.isfinite(v) for v in seen.values()), seen
    assert seen == {k: big[k] for k in seen}
    assert {k for k in nan if k.endswith("_inductive")} == {f"{m}/acc_inductive" for m in
                                                          ("hgnn", "mlp", "lighthgnn", "lighthgnn_plus",
                                                           "lighthgnn_logtarget")}


def test_resume_skips_finished_stages_and_reports_the_same(compose_cfg, tmp_path):
    from common.runner import run_method

    cfg = compose_cfg(["experiment=lighthgnn_smoke", f"run_dir={tmp_path}", "logger=none"])
    first = run_method(cfg)
    assert all((tmp_path / stage / "checkpoint.pt").exists()
               for stage in ("hgnn", "mlp", "lighthgnn", "lighthgnn_plus", "lighthgnn_logtarget"))
    assert run_method(compose_cfg(["experiment=lighthgnn_smoke", f"run_dir={tmp_path}", "logger=none",
                                   "resume=true"])) == first


def test_safe_unpickler_refuses_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    (tmp_path / "evil.pickle").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(safe_pickle.RefusedPickle, match="builtins.print"):
        safe_pickle.load(tmp_path / "evil.pickle")
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


def test_dataset_config_dims_are_checked(compose_cfg, monkeypatch):
    from methods.lighthgnn import data

    monkeypatch.setattr(data, "load_hypergraph", lambda *a: synthetic_hypergraph(50, num_classes=7, feature_dim=8))
    cfg = compose_cfg(["method=lighthgnn", "dataset=cocitation_cora"])
    with pytest.raises(UserError, match="8 features and 7 classes.*dataset.feature_dim=1433"):
        data.load(cfg.dataset)


def test_random_split_sizes_and_disjoint():
    hg = synthetic_hypergraph(600, num_classes=3, seed=1)
    s = random_split(hg.labels, 20, 30, seed=0)
    assert len(s["train"]) == 60 and len(s["val"]) == 90 and len(s["test"]) == 600 - 150
    assert len(set(s["train"].tolist()) | set(s["val"].tolist()) | set(s["test"].tolist())) == 600
    assert all(2 <= len(e) <= 8 for e in hg.edges) and min(len(e) for e in hg.edges) >= 3


def test_l1_feature_normalisation_is_dhg_norm_ft_ord_1():
    x = (torch.rand(7, 11, generator=torch.Generator().manual_seed(0)) < 0.3).float()
    x[3] = 0                                                   # an empty bag-of-words row stays empty
    # DHG's dhg/datapipe/normalize.py norm_ft(X, ord=1), written out
    inv = 1 / torch.linalg.norm(x, ord=1, dim=1, keepdim=True)
    inv[torch.isinf(inv)] = 0
    torch.testing.assert_close(l1_normalise(x), x * inv)
    nonzero = x.sum(1) > 0
    torch.testing.assert_close(l1_normalise(x).sum(1)[nonzero], torch.ones(int(nonzero.sum())))
    hg = Hypergraph(x, torch.zeros(7, dtype=torch.long), [[0, 1]])
    assert normalise_features(hg, "none") is hg
    torch.testing.assert_close(normalise_features(hg, "l1").features, x * inv)
    with pytest.raises(UserError, match="feature_norm"):
        normalise_features(hg, "l2")


def test_the_log_target_student_leaves_the_other_students_unchanged(compose_cfg, tmp_path):
    """lighthgnn_logtarget trains after the other students: without it they draw the same
    initialisations and report the same numbers; an unknown student is a config error."""
    from common.runner import run_method

    base = ["experiment=lighthgnn_smoke", "logger=none"]
    full = run_method(compose_cfg(base + [f"run_dir={tmp_path / 'a'}"]))
    three = run_method(compose_cfg(base + [f"run_dir={tmp_path / 'b'}",
                                           "method.students=[mlp,lighthgnn,lighthgnn_plus]"]))
    assert three == {k: v for k, v in full.items() if not k.startswith("lighthgnn_logtarget/")}
    assert "lighthgnn_logtarget/acc" in full
    with pytest.raises(UserError, match="method.students"):
        run_method(compose_cfg(base + [f"run_dir={tmp_path / 'c'}", "method.students=[mlp,kd]"]))
