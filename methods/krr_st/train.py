"""The stages after the target encoder: distillation (the outer loop), pretraining on the
distilled (or real) set and fine-tuning on the target task. Official `train.py`,
`algorithms/{distill,pretrain_krr_st,pretrain_dc,finetune}.py`."""
from __future__ import annotations

from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from common.distill import SyntheticSet
from common.trainer import lr_factor
from methods.krr_st.loss import krr_outer_loss
from methods.krr_st.pool import ModelPool


def batches(n: int, batch_size: int, generator: torch.Generator | None) -> Iterator[torch.Tensor]:
    """Index batches as the floor's `unrolled_sgd`: consecutive chunks of torch.randperm(n),
    renewed when used up (the last chunk of a permutation may be short)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    while True:
        yield from torch.randperm(n, generator=generator).split(batch_size)


def _lr_factor(schedule: str, steps: int, warmup_steps: int) -> Callable[[int], float]:
    """The pretraining lr multiplier at step s. constant (official pretrain_krr_st.py) and cosine
    (linear warm-up over warmup_steps, then cosine to 0: official pretrain_frepo.py,
    get_cosine_schedule_with_warmup) are the shared trainer's `lr_factor`; its warm-up ramps
    (s + 1) / warmup where the official one ramps s / warmup (first step at lr 0): a 1 / warmup shift
    over the warm-up only (README Deviations). step (x0.1 from steps // 2 on: official pretrain_dc.py,
    MultiStepLR at half the epochs) is not a shared schedule, so it stays here."""
    if schedule == "step":
        return lambda s: 1.0 if s < steps // 2 else 0.1
    if schedule == "constant":
        return lambda s: lr_factor(s, steps, "constant", 0)
    if schedule == "cosine":
        if not 0 <= warmup_steps < max(steps, 1):
            raise ValueError(f"warmup_steps must lie in [0, steps), got {warmup_steps} of {steps}")
        return lambda s: lr_factor(s, steps, "cosine", warmup_steps)
    raise ValueError(f"schedule must be 'constant', 'step' or 'cosine', got '{schedule}'")


def pretrain(model: nn.Module, x: torch.Tensor, targets: torch.Tensor, steps: int, batch_size: int, lr: float,
             momentum: float, weight_decay: float, generator: torch.Generator | None = None, *,
             optimizer: str = "sgd", schedule: str = "constant", warmup_steps: int = 0) -> nn.Module:
    """`steps` steps on MSE(f(x_B), targets_B) for float targets (KRR-ST's representations,
    learnt labels) or cross-entropy for int64 labels (the Random / Kmeans rows); in place.
    optimizer: sgd (momentum, weight decay) or adamw (momentum unused); schedule: `_lr_factor`."""
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if optimizer not in ("sgd", "adamw"):
        raise ValueError(f"optimizer must be 'sgd' or 'adamw', got '{optimizer}'")
    factor = _lr_factor(schedule, steps, warmup_steps)
    if len(x) != len(targets):
        raise ValueError(f"images and targets differ in length: {len(x)} vs {len(targets)}")
    if targets.is_floating_point():
        with torch.no_grad():
            was = model.training
            width = model.eval()(x[:1]).shape[1:]
            model.train(was)
        if width != targets.shape[1:]:
            raise ValueError(f"the student's head width {tuple(width)} differs from the targets' dimension "
                             f"{tuple(targets.shape[1:])}")
    loss_fn = F.mse_loss if targets.is_floating_point() else F.cross_entropy
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    model.train()
    it = batches(len(x), batch_size, generator)
    for _ in range(steps):
        idx = next(it)
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x[idx]), targets[idx]).backward()
        opt.step()
        sched.step()
    return model


def finetune(model: nn.Module, x: torch.Tensor, y: torch.Tensor, num_classes: int, steps: int, batch_size: int,
             lr: float, momentum: float, weight_decay: float, generator: torch.Generator | None = None) -> nn.Module:
    """Drop the head, attach a new linear one (`model.fc`, width model.feature_dim -> num_classes)
    and fine-tune every layer with CE, SGD and a cosine schedule over `steps`; in place."""
    model.fc = nn.Linear(model.feature_dim, num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps, "cosine", 0))
    model.train()
    it = batches(len(x), batch_size, generator)
    for _ in range(steps):
        idx = next(it)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
        sched.step()
    return model


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1000) -> float:
    model.eval()
    pred = torch.cat([model(x[i:i + batch_size]).argmax(1) for i in range(0, len(x), batch_size)])
    return float(100.0 * (pred == y).float().mean())


def distill(make_model: Callable[[], nn.Module], x_init: torch.Tensor, y_init: torch.Tensor, x_source: torch.Tensor,
            y_source: torch.Tensor, steps: int, batch_size: int, lr: float, num_models: int, online_steps: int,
            generator: torch.Generator, rel_ridge: float = 1e-6, online_lr: float = 0.1, online_momentum: float = 0.9,
            online_weight_decay: float = 1e-3, end_factor: float = 1e-3,
            log: Callable[[dict, int], None] | None = None) -> SyntheticSet:
    """KRR-ST (Algorithm 1): X_s, Y_s learnt by AdamW (wd 0, lr linearly down to lr * end_factor)
    on krr_outer_loss with a pool model f_j drawn uniformly per step (eval mode, as the official
    `distill.py`), then f_j's online update. `y_source`: g(x) of every source image (or labels)."""
    syn = SyntheticSet(x_init, y_init.float(), learn_targets=True)
    if steps == 0:
        return syn
    opt = torch.optim.AdamW([syn.images, syn.targets], lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=end_factor, total_iters=steps)
    pool = ModelPool(make_model, num_models, online_steps, generator, online_lr, online_momentum, online_weight_decay)
    pool.init(syn.images.detach(), syn.targets.detach())
    it = batches(len(x_source), batch_size, generator)
    for step in range(steps):
        j = int(torch.randint(num_models, (1,), generator=generator))
        model = pool.models[j].eval()
        idx = next(it)
        loss = krr_outer_loss(model.embed, syn.images, syn.targets, x_source[idx], y_source[idx], rel_ridge)
        # gradients for X_s and Y_s only (as the official distill.py), none for the pool model's weights
        syn.images.grad, syn.targets.grad = torch.autograd.grad(loss, [syn.images, syn.targets])
        opt.step()
        sched.step()
        pool.update(j, syn.images.detach(), syn.targets.detach())
        if log is not None:
            log({"outer_loss": float(loss.detach())}, step)
    return syn
