"""Training the stack by persistent contrastive divergence (PCD; issue #53, "Training").

The log-likelihood gradient of a binary RBM is minus the gradient of
mean_data F_v(v) - mean_model F_v(v); with dF_v/dW = -v sigmoid(b + vW)^T it reads

    dW = <v p(h|v)^T>_data - <v p(h|v)^T>_chains,  da = <v>_data - <v>_chains,
    db = <p(h|v)>_data - <p(h|v)>_chains,

estimated on a minibatch and on persistent chains moved by `pcd_steps` Gibbs sweeps per update.
The trainer subtracts l2 * W (weight decay on W only) and hands minus that ascent direction to the
optimizer (torch optimizers minimise). RBM l+1 trains on h ~ p_l(h | v) of RBM l's inputs.
"""
from __future__ import annotations

from typing import Callable

import torch

from methods.stacked_tempering.rbm import BinaryRBM, check_binary
from methods.stacked_tempering.sampler import gibbs_step


def pcd_gradient(rbm: BinaryRBM, v_data: torch.Tensor, v_model: torch.Tensor):
    """The likelihood part of the gradient (ascent direction): (dW (N, M), da (N,), db (M,))."""
    with torch.no_grad():
        v_data, v_model = v_data.to(rbm.weight.dtype), v_model.to(rbm.weight.dtype)
        ph_d, ph_m = rbm.hidden_probs(v_data), rbm.hidden_probs(v_model)
        dw = v_data.T @ ph_d / len(v_data) - v_model.T @ ph_m / len(v_model)
        return dw, v_data.mean(0) - v_model.mean(0), ph_d.mean(0) - ph_m.mean(0)


def _states(n: int, lo: int, hi: int, dtype) -> torch.Tensor:
    """Binary states lo..hi-1 of n units, one per row (bit j of the index = unit j)."""
    idx = torch.arange(lo, hi)
    return ((idx[:, None] >> torch.arange(n)) & 1).to(dtype)


def model_moments(rbm: BinaryRBM, chunk: int = 1 << 14):
    """Exact model moments (<v h^T>, <v>, <h>) of a small RBM, enumerating its smaller layer (<= 20
    units): over hidden states, p(h) ∝ exp(-F_h(h)) and E[v | h] = p(v = 1 | h); over visible states,
    p(v) ∝ exp(-F_v(v)) and E[h | v] = p(h = 1 | v). float64 weights, one pass over the states."""
    n, m = rbm.num_visible, rbm.num_hidden
    side = "h" if m <= n else "v"
    k = min(n, m)
    if k > 20:
        raise ValueError(f"exact moments enumerate 2^min(N, M) states; min(N, M) = {k} is too many (at most 20)")
    a, b, w = rbm.visible_bias, rbm.hidden_bias, rbm.weight
    vh = torch.zeros(n, m, dtype=torch.float64)
    ev, eh = torch.zeros(n, dtype=torch.float64), torch.zeros(m, dtype=torch.float64)
    z, shift = torch.zeros((), dtype=torch.float64), None
    with torch.no_grad():
        # one pass, the sums kept relative to the running max log-weight (a streaming logsumexp)
        for lo in range(0, 2 ** k, chunk):
            s = _states(k, lo, min(lo + chunk, 2 ** k), w.dtype)
            field = a + s @ w.T if side == "h" else b + s @ w        # the other layer's input fields
            logw = (s @ (b if side == "h" else a) + torch.nn.functional.softplus(field).sum(-1)).double()
            top = logw.max()
            if shift is None or top > shift:
                scale = torch.exp(shift - top) if shift is not None else 0.0
                vh, ev, eh, z, shift = vh * scale, ev * scale, eh * scale, z * scale, top
            p = torch.exp(logw - shift)                 # <= 1: safe in the RBM's dtype
            z += p.sum()
            p = p.to(w.dtype)
            cond = torch.sigmoid(field)
            v, h = (cond, s) if side == "h" else (s, cond)
            vh += (v.T @ (p[:, None] * h)).double()
            ev += (p @ v).double()
            eh += (p @ h).double()
        vh, ev, eh = vh / z, ev / z, eh / z
    dt = rbm.weight.dtype
    return vh.to(dt), ev.to(dt), eh.to(dt)


def exact_gradient(rbm: BinaryRBM, v_data: torch.Tensor):
    """`pcd_gradient` with the model term exact (`model_moments`) instead of the chains' average: the
    log-likelihood gradient itself, so the modes' relative weights are learned even where no chain
    could cross between them (ours; the paper trains by PCD, see README Deviations)."""
    with torch.no_grad():
        v_data = v_data.to(rbm.weight.dtype)
        ph_d = rbm.hidden_probs(v_data)
        vh, ev, eh = model_moments(rbm)
        return v_data.T @ ph_d / len(v_data) - vh, v_data.mean(0) - ev, ph_d.mean(0) - eh


def init_visible_bias(rbm: BinaryRBM, data: torch.Tensor, eps: float = 1e-3) -> None:
    """a_i = logit of the data's mean of v_i (clamped to [eps, 1 - eps]): the independent-site fit."""
    with torch.no_grad():
        p = data.to(rbm.weight.dtype).mean(0).clamp(eps, 1 - eps)
        rbm.visible_bias.copy_(torch.log(p) - torch.log1p(-p))


def train_rbm(rbm: BinaryRBM, data: torch.Tensor | Callable[[int], torch.Tensor], epochs: int, batch_size: int,
              optimizer: Callable, pcd_steps: int = 1, num_chains: int = 100, l2: float = 0.0,
              generator: torch.Generator | None = None, init_visible: bool = True,
              negative: str = "pcd") -> BinaryRBM:
    """PCD training. `data`: binary (n, N), or a function epoch -> binary (n, N) (the upper RBMs'
    inputs, redrawn each epoch). `optimizer(params)` builds a torch optimizer. negative="exact"
    takes the model term from `exact_gradient` (small RBMs) instead of persistent chains."""
    if negative not in ("pcd", "exact"):
        raise ValueError(f"negative must be 'pcd' or 'exact', got {negative!r}")
    if epochs < 0 or batch_size < 1 or pcd_steps < 1 or num_chains < 1:
        raise ValueError(f"need epochs >= 0, batch_size, pcd_steps, num_chains >= 1; got {epochs}, "
                         f"{batch_size}, {pcd_steps}, {num_chains}")
    draw = data if callable(data) else (lambda epoch: data)
    first = draw(0)
    check_binary(first, "training data")
    if first.shape[-1] != rbm.num_visible:
        raise ValueError(f"data have {first.shape[-1]} units, the RBM {rbm.num_visible} visible units")
    if init_visible:
        init_visible_bias(rbm, first)
    opt = optimizer(list(rbm.parameters()))
    chains = first[torch.randint(len(first), (num_chains,), generator=generator)].to(rbm.weight.dtype)
    for epoch in range(epochs):
        x = first if epoch == 0 else draw(epoch)
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), batch_size):
            batch = x[order[start:start + batch_size]]
            if negative == "exact":
                dw, da, db = exact_gradient(rbm, batch)
            else:
                with torch.no_grad():
                    for _ in range(pcd_steps):
                        chains, _ = gibbs_step(rbm, chains, generator)
                dw, da, db = pcd_gradient(rbm, batch, chains)
            rbm.weight.grad = -(dw - l2 * rbm.weight.detach())
            rbm.visible_bias.grad = -da
            rbm.hidden_bias.grad = -db
            opt.step()
    return rbm


def train_stack(rbm1: BinaryRBM, data: torch.Tensor, hidden_sizes, epochs: int, batch_size: int,
                optimizer: Callable, pcd_steps: int = 1, num_chains: int = 100, l2: float = 0.0,
                init_std: float = 0.01, generator: torch.Generator | None = None,
                negative: str = "pcd") -> list[BinaryRBM]:
    """RBMs 2.. on top of a trained RBM 1: RBM l+1 (M_l -> hidden_sizes[l-1]) on h ~ p_l(h | v) of
    RBM l's inputs (redrawn each epoch, bottom-up from the data). Returns [rbm1, rbm2, ...]."""
    rbms = [rbm1]
    for size in hidden_sizes:
        below = list(rbms)

        def inputs(epoch, below=below):
            x = data
            with torch.no_grad():
                for r in below:
                    x = r.sample_h(x, generator)
            return x

        rbm = BinaryRBM(rbms[-1].num_hidden, int(size), init_std=init_std, generator=generator)
        rbms.append(train_rbm(rbm, inputs, epochs, batch_size, optimizer, pcd_steps, num_chains, l2, generator,
                              negative=negative))
    return rbms


def random_stack(rbm1: BinaryRBM, hidden_sizes, init_std: float = 0.01,
                 generator: torch.Generator | None = None) -> list[BinaryRBM]:
    """The control: the same RBM 1 under untrained upper RBMs (weights N(0, init_std^2), zero biases)."""
    rbms = [rbm1]
    for size in hidden_sizes:
        rbms.append(BinaryRBM(rbms[-1].num_hidden, int(size), init_std=init_std, generator=generator))
    return rbms
