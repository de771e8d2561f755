"""NCL: rep_relu's forward and gradient, and the metrics against hand-computed examples."""
import math

import pytest
import torch
import torch.nn.functional as F

from methods.ncl import NonNegClassifier, class_consistency, effective_rank, nonneg, orthogonality, sparsity
from methods.ncl.metrics import top_dimensions


def test_rep_relu_forward_is_relu_and_gradient_is_gelus():
    z = torch.linspace(-3, 3, 41, dtype=torch.float64, requires_grad=True)
    out = nonneg(z, "rep_relu")
    assert torch.equal(out.detach(), F.relu(z.detach()))
    out.sum().backward()
    # GELU'(x) = Φ(x) + x φ(x), written out independently of torch's gelu
    x = z.detach()
    expected = 0.5 * (1 + torch.erf(x / math.sqrt(2))) + x * torch.exp(-x ** 2 / 2) / math.sqrt(2 * math.pi)
    torch.testing.assert_close(z.grad, expected)
    assert (z.grad[x < 0] != 0).all()  # negative units still learn: the point of rep_relu


def test_relu_and_none():
    z = torch.tensor([-1.0, 0.5])
    assert nonneg(z, "relu").tolist() == [0.0, 0.5] and nonneg(z, "none").tolist() == [-1.0, 0.5]
    with pytest.raises(ValueError):
        nonneg(z, "softplus")


def test_sparsity_by_hand():
    z = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 1e-6]])
    assert sparsity(z) == pytest.approx(4 / 6)


def test_class_consistency_by_hand():
    # dim 0 active on samples of classes [0, 0, 1] -> 2/3; dim 1 on [1] -> 1; dim 2 never active (ignored)
    z = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 3.0, 0.0], [0.0, 0.0, 0.0]])
    y = torch.tensor([0, 0, 1, 1])
    assert class_consistency(z, y) == pytest.approx((2 / 3 + 1) / 2)


def test_orthogonality_by_hand():
    a = torch.tensor([1.0, 2.0, 3.0, 4.0])
    z = torch.stack([a, 2 * a, -a], dim=1)         # correlations ±1 off the diagonal
    assert orthogonality(z) == pytest.approx(6 / 9)
    g = torch.Generator().manual_seed(0)
    assert orthogonality(torch.randn(20000, 4, generator=g)) < 0.02


def test_effective_rank_by_hand():
    assert effective_rank(torch.eye(5)) == pytest.approx(5.0)
    assert effective_rank(torch.ones(6, 3)) == pytest.approx(1.0)
    # singular values (3, 1): p = (3/4, 1/4)
    expected = math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert effective_rank(torch.diag(torch.tensor([3.0, 1.0]))) == pytest.approx(expected)


def test_top_dimensions_by_mean_activation():
    z = torch.tensor([[0.0, 5.0, 1.0], [0.0, 3.0, 2.0]])
    assert top_dimensions(z, 2).tolist() == [1, 2]


def test_nce_classifier_is_nonnegative():
    from common.nn import SmallCNN

    model = NonNegClassifier(SmallCNN(1, 4), 16, 8, 10, nonneg_features=True)
    x = torch.randint(0, 255, (5, 1, 28, 28), dtype=torch.uint8)
    assert (model.features(x) >= 0).all() and model.bias is None
    loss, _ = model.training_step((x, torch.arange(5)))
    loss.backward()
    assert torch.isfinite(model.weight.grad).all()
