"""Stacked Tempering's exact-gradient training (ours, README Deviations): the model term enumerated over
the smaller layer equals autograd of the exact log-likelihood (log Z by a logsumexp over every visible
state, written independently), on either side; a training run with it raises the exact likelihood."""
from __future__ import annotations

import pytest
import torch

from methods.stacked_tempering.train import exact_gradient, model_moments, train_rbm
from tests.test_stacked_tempering import rbm


def _all_states(n: int) -> torch.Tensor:
    return torch.tensor([[(i >> j) & 1 for j in range(n)] for i in range(2 ** n)], dtype=torch.float64)


def _log_likelihood(r, data):
    """mean over data of log p(v) = -F_v(v) - log Z, Z summed over all 2^N visible states."""
    return -r.free_energy_v(data).mean() - torch.logsumexp(-r.free_energy_v(_all_states(r.num_visible)), 0)


@pytest.mark.parametrize("n,m", [(6, 3), (3, 6)])      # enumerates h, then v
def test_exact_gradient_is_the_autograd_gradient_of_the_exact_log_likelihood(n, m):
    r = rbm(n, m, 3)
    data = (torch.rand(11, n, generator=torch.Generator().manual_seed(1)) < 0.4).double()
    dw, da, db = exact_gradient(r, data)
    r.zero_grad()
    _log_likelihood(r, data).backward()
    assert torch.allclose(dw, r.weight.grad, atol=1e-10)
    assert torch.allclose(da, r.visible_bias.grad, atol=1e-10)
    assert torch.allclose(db, r.hidden_bias.grad, atol=1e-10)


def test_model_moments_chunks_agree_and_refuses_large_layers():
    r = rbm(7, 5, 4)
    for a, b in zip(model_moments(r), model_moments(r, chunk=3)):
        assert torch.allclose(a, b, atol=1e-12)
    with pytest.raises(ValueError, match="too many"):
        model_moments(rbm(21, 22, 0))
    with pytest.raises(ValueError, match="negative"):
        train_rbm(rbm(4, 3, 0), torch.zeros(5, 4, dtype=torch.float64), 1, 5, lambda p: torch.optim.SGD(p, 0.1),
                  negative="cd")


def test_exact_training_raises_the_exact_likelihood():
    g = torch.Generator().manual_seed(0)
    protos = torch.tensor([[1, 1, 1, 0, 0, 0, 1, 0], [0, 0, 0, 1, 1, 1, 0, 1]], dtype=torch.float64)
    data = protos[torch.randint(2, (60,), generator=g)]
    flips = torch.rand(data.shape, generator=g) < 0.05
    data = torch.where(flips, 1 - data, data)
    r = rbm(8, 3, 5)
    before = float(_log_likelihood(r, data))
    train_rbm(r, data, 40, 20, lambda p: torch.optim.SGD(p, lr=0.1), generator=g, negative="exact")
    assert float(_log_likelihood(r, data)) > before + 1.0
