"""twinsight: the collapse diagnostics and the row paths (majority, no_np, frozen twin, clipping)."""
import math

import pytest
import torch

from methods.twinsight.data import FewLabelClients
from methods.twinsight.diagnostics import effective_rank, mean_cosine, pred_histogram
from methods.twinsight.loss import client_loss
from methods.twinsight.model import TinyCNN, TwinModel
from methods.twinsight.train import majority_row, make_step, row_models


def test_pred_histogram_against_counting():
    pred = torch.tensor([2, 2, 0, 3, 2, 0])
    hist = pred_histogram(pred, 4)
    assert hist.tolist() == pytest.approx([100 * 2 / 6, 0.0, 100 * 3 / 6, 100 * 1 / 6])
    for bad in (torch.tensor([0, 4]), torch.tensor([], dtype=torch.long), torch.zeros(2, 2, dtype=torch.long)):
        with pytest.raises(ValueError):
            pred_histogram(bad, 4)


def test_mean_cosine_against_a_double_loop():
    f = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    want = sum(float(f[i] @ f[j]) / (float(f[i].norm()) * float(f[j].norm()))
               for i in range(5) for j in range(5) if i != j) / 20
    assert mean_cosine(f) == pytest.approx(want, rel=1e-9)
    assert mean_cosine(torch.ones(4, 3) * torch.arange(1.0, 5.0)[:, None]) == pytest.approx(1.0)   # parallel rows
    with pytest.raises(ValueError):
        mean_cosine(torch.ones(1, 3))


def test_effective_rank_of_a_line_a_plane_and_isotropic_features():
    t = torch.randn(50, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    v = torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64)
    assert effective_rank(t[:, None] * v + 3.0) == pytest.approx(1.0, abs=1e-6)   # on one line
    # two orthogonal directions with equal spread: singular values equal, rank 2
    plane = torch.tensor([[1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, -1.0, 0]])
    assert effective_rank(plane) == pytest.approx(2.0, rel=1e-9)
    # entropy written out for an unequal spectrum
    f = torch.tensor([[3.0, 0], [-3.0, 0], [0, 1.0], [0, -1.0]])
    p = [3 / 4, 1 / 4]
    assert effective_rank(f) == pytest.approx(math.exp(-sum(q * math.log(q) for q in p)), rel=1e-9)
    assert effective_rank(torch.ones(4, 3)) == 0.0


def test_majority_row_scores_the_labeled_clients_most_frequent_class():
    labels = torch.tensor([1, 1, 2, 0, 0, 0, 0, 2])
    d = FewLabelClients(torch.zeros(8, 1, 2, 2), labels, [torch.tensor([0, 1, 2]), torch.tensor([3, 4, 5, 6, 7])],
                        [0], torch.zeros(0, dtype=torch.long), torch.zeros(4, 1, 2, 2), torch.tensor([1, 0, 1, 2]))
    res = majority_row(d, d.test_labels, 3, 40.0, 20)   # client 1 (unlabeled, mostly 0) is never read
    assert res["acc"] == pytest.approx(50.0) and res["top_share"] == 100.0
    assert res["rounds_to_target"] == 1.0               # constant 50 % reaches 40 % at the first round


def _twin():
    torch.manual_seed(0)
    return TwinModel(TinyCNN(1, 28, 8), TinyCNN(1, 28, 8), feat_dim=8, num_classes=3, proj_hidden=8, proj_dim=4)


LOSS = dict(insdis=0.5, sim=3.0, ulb_weight=0.0, threshold=0.95, temperature=0.5, normalizer="square")


def test_no_np_is_twinsight_with_sim_zero_and_frozen_twin_never_moves_the_unsupervised_twin():
    twin = _twin()
    xw, xs = torch.rand(4, 1, 28, 28), torch.rand(4, 1, 28, 28)
    y = torch.tensor([0, 1, 2, 0])
    models = row_models("twinsight", twin)
    h_s, lg = models["sup"](torch.cat([xw, xs]))
    h_u, z = models["unsup"](torch.cat([xw, xs]))
    want, _ = client_loss(h_s[:4], lg[:4], lg[4:], h_u[:4], z[:4], z[4:], labels=y, **{**LOSS, "sim": 0.0})
    got, logs = make_step("no_np", LOSS, 1.0)(models, xw, xs, y)
    assert float(got) == pytest.approx(float(want), rel=1e-6) and logs["np"] > 0
    frozen = row_models("frozen_twin", _twin())
    before = [p.detach().clone() for p in frozen["unsup"].parameters()]
    loss, logs = make_step("frozen_twin", LOSS, 1.0)(frozen, xw, xs, None)   # an unlabeled client
    loss.backward()
    assert all(p.grad is None for p in frozen["unsup"].parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in frozen["sup"].parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, frozen["unsup"].parameters())) and "ce" not in logs
