"""MTT's `evaluate_synset`: K fresh nets trained on the synthetic set, test accuracy.
SGD (momentum 0.9, wd 5e-4), lr x0.1 after epoch floor(E/2), soft CE on float targets, CE on int."""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from common.distill.unroll import target_loss


def _net_seed(seed: int, k: int) -> int:
    return seed * 1000 + k


def _lr_at(lr: float, epoch: int, epochs: int) -> float:
    return lr * 0.1 if epoch >= epochs // 2 else lr


def _accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    return float((logits.argmax(-1) == y).float().mean()) * 100.0


def _batches(n: int, batch_size: int, gen: torch.Generator) -> list[torch.Tensor]:
    return list(torch.randperm(n, generator=gen).split(batch_size))


def _train_loop(make_net, x, t, lr, epochs, batch_size, seed, k, momentum, weight_decay, augment):
    torch.manual_seed(_net_seed(seed, k))
    net = make_net()
    gen = torch.Generator().manual_seed(_net_seed(seed, k))
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    net.train()
    for epoch in range(epochs):
        for group in opt.param_groups:
            group["lr"] = _lr_at(lr, epoch, epochs)
        for idx in _batches(len(x), batch_size, gen):
            xb = x[idx] if augment is None else augment(x[idx])
            opt.zero_grad(set_to_none=True)
            target_loss(net(xb), t[idx]).backward()
            opt.step()
    net.eval()
    return net


def _vectorized(make_net, x, t, x_test, y_test, lr, num_nets, epochs, batch_size, seed, momentum, weight_decay,
                augment) -> list[float]:
    nets = []
    for k in range(num_nets):
        torch.manual_seed(_net_seed(seed, k))
        nets.append(make_net())
    if any(True for _ in nets[0].buffers()):
        raise ValueError("vectorized evaluation needs a network without buffers (use norm instancenorm or none)")
    params, _ = stack_module_state(nets)
    names = list(params)
    base = nets[0]
    gens = [torch.Generator().manual_seed(_net_seed(seed, k)) for k in range(num_nets)]

    def logits_one(p, xb):
        return functional_call(base, p, (xb,))

    forward_all = vmap(logits_one)
    bufs = {n: None for n in names}
    for epoch in range(epochs):
        cur = _lr_at(lr, epoch, epochs)
        per_net = [_batches(len(x), batch_size, g) for g in gens]
        for step in range(len(per_net[0])):
            idx = torch.stack([b[step] for b in per_net])                       # (K, B)
            xb = x[idx]                                                          # (K, B, C, H, W)
            if augment is not None:
                xb = torch.stack([augment(xk) for xk in xb])
            leaves = {n: params[n].detach().requires_grad_(True) for n in names}
            logits, tb = forward_all(leaves, xb), t[idx]                         # (K, B, classes)
            # the nets are independent: d(sum_k loss_k)/d theta_k = d loss_k / d theta_k
            total = sum(target_loss(logits[k], tb[k]) for k in range(num_nets))
            grads = dict(zip(names, torch.autograd.grad(total, [leaves[n] for n in names])))
            with torch.no_grad():
                for n in names:                               # torch.optim.SGD's update, written out
                    d = grads[n] + weight_decay * params[n] if weight_decay else grads[n]
                    if momentum:
                        bufs[n] = d.clone() if bufs[n] is None else momentum * bufs[n] + d
                        d = bufs[n]
                    params[n] = params[n] - cur * d
    with torch.no_grad():
        logits = vmap(lambda p: functional_call(base, p, (x_test,)))(params)         # (K, n_test, classes)
    return [_accuracy(logits[k], y_test) for k in range(num_nets)]


@torch.no_grad()
def _test_acc(net, x_test, y_test) -> float:
    return _accuracy(net(x_test), y_test)


def evaluate_synthetic(make_net: Callable[[], nn.Module], images: torch.Tensor, targets: torch.Tensor,
                       x_test: torch.Tensor, y_test: torch.Tensor, lr: float, num_nets: int, epochs: int,
                       batch_size: int, seed: int, momentum: float = 0.9, weight_decay: float = 5e-4,
                       augment: Callable | None = None, vectorized: bool = False) -> dict:
    """{acc_mean, acc_std, accs} (%) of `num_nets` fresh nets (net k: seed*1000 + k for its init and
    its batches) trained on (images, targets). `vectorized`: the K nets at once (stack_module_state
    + vmap), each on the same batches as in the loop."""
    if len(images) != len(targets):
        raise ValueError(f"images and targets differ in length: {len(images)} vs {len(targets)}")
    if num_nets < 1 or epochs < 0 or batch_size < 1:
        raise ValueError(f"need num_nets >= 1, epochs >= 0, batch_size >= 1; got {num_nets}, {epochs}, {batch_size}")
    lr = float(lr)
    if not lr > 0:
        raise ValueError(f"evaluation lr must be > 0, got {lr}")
    x, t = images.detach(), targets.detach()
    with torch.random.fork_rng(devices=[]):
        if vectorized:
            accs = _vectorized(make_net, x, t, x_test, y_test, lr, num_nets, epochs, batch_size, seed, momentum,
                               weight_decay, augment)
        else:
            accs = [_test_acc(_train_loop(make_net, x, t, lr, epochs, batch_size, seed, k, momentum, weight_decay,
                                          augment), x_test, y_test) for k in range(num_nets)]
    acc = torch.tensor(accs)
    return {"acc_mean": float(acc.mean()), "acc_std": float(acc.std(unbiased=False)) if len(accs) > 1 else 0.0,
            "accs": accs}
