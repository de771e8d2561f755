"""The DATM distillation loop (official distill/DATM.py without DSA/ZCA/EMA): sample an expert and
a start epoch in the (growing) window, unroll N student steps on the synthetic set, match the
expert M epochs later, update images, soft labels and the step size when L <= threshold."""
from __future__ import annotations

import math
from typing import Callable, Literal

import torch
from torch import nn

from common.distill import SyntheticSet, class_balanced_indices, functional_forward
from methods.datm.labels import correct_logit_average, expert_logits, select_correct
from methods.datm.loss import matching_loss
from methods.datm.schedule import sample_start_epoch, start_epoch_bound


INITS = ("correct", "real", "real_expert")


class DATM:
    """Hyper-parameters with the official CIFAR-10 defaults (configs/CIFAR-10/ConvIN/IPC10.yaml);
    `init`/`soft_labels` = real/False with a fixed window and no threshold give MTT.
    `init`: correct (official `pix_init: samples_predicted_correctly`: images expert 0 classifies
    correctly, soft labels averaged over the correctly classifying experts), real (random real
    images, hard labels: MTT) or real_expert (official `pix_init: real`, CIFAR-100 IPC 50: random
    real images, soft labels = expert 0's final-epoch logits, `buffer[0][-1]`)."""

    def __init__(self, ipc: int = 10, syn_steps: int = 80, expert_epochs: int = 2, min_start: int = 0,
                 max_start: int = 20, current_max_start: int | None = 10, expansion_end: int | None = 1000,
                 iterations: int = 10000, lr_img: float = 100.0, lr_lr: float = 1e-5, lr_y: float = 2.0,
                 momentum_y: float = 0.9, lr_teacher: float = 0.01, threshold: float = 1.0,
                 batch_syn: int | None = None, init: Literal["correct", "real", "real_expert"] = "correct",
                 soft_labels: bool = True, learn_lr: bool = True):
        if not threshold > 0:
            raise ValueError(f"threshold must be > 0, got {threshold}")
        if init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got '{init}'")
        if soft_labels and init == "real":
            raise ValueError("init='real' has hard labels (MTT): soft labels start from init='correct' (averaged "
                             "correct logits) or init='real_expert' (expert 0's logits)")
        if init == "real_expert" and not soft_labels:
            raise ValueError("init='real_expert' initialises soft labels from expert 0's logits: set soft_labels=True")
        start_epoch_bound(0, min_start, max_start, current_max_start, expansion_end)   # validates the window
        self.ipc, self.syn_steps, self.expert_epochs = int(ipc), int(syn_steps), int(expert_epochs)
        self.min_start, self.max_start = int(min_start), int(max_start)
        self.current_max_start, self.expansion_end = current_max_start, expansion_end
        self.iterations, self.lr_img, self.lr_lr, self.lr_y = int(iterations), lr_img, lr_lr, lr_y
        self.momentum_y, self.lr_teacher, self.threshold = momentum_y, lr_teacher, float(threshold)
        self.batch_syn, self.init, self.soft_labels, self.learn_lr = batch_syn, init, soft_labels, learn_lr

    def check_buffer(self, buffer: torch.Tensor, module: nn.Module):
        num_params = sum(p.numel() for p in module.parameters())
        if buffer.dim() != 3 or buffer.shape[2] != num_params:
            raise ValueError(f"the expert buffer holds {buffer.shape[-1]} parameters per snapshot, the network "
                             f"has {num_params}")
        epochs = buffer.shape[1] - 1
        if self.max_start - 1 + self.expert_epochs > epochs:
            raise ValueError(f"max_start + M = {self.max_start} - 1 + {self.expert_epochs} exceeds the experts' "
                             f"{epochs} epochs")

    @torch.no_grad()
    def initial_set(self, module: nn.Module, buffer: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                    generator: torch.Generator) -> SyntheticSet:
        """Real images (random, or among expert 0's correct ones), hard labels, the experts'
        averaged correct logits (init correct) or expert 0's logits (init real_expert); lr = lr_teacher."""
        if self.init == "correct":
            idx = select_correct(functional_forward(module, buffer[0, -1], x), y, self.ipc, generator)
        else:
            idx = class_balanced_indices(y, self.ipc, generator)
        images = x[idx].clone()
        if not self.soft_labels:
            targets = y[idx].clone()
        elif self.init == "real_expert":
            targets = expert_logits(module, buffer, images)
        else:
            logits = torch.stack([functional_forward(module, buffer[e, -1], images) for e in range(len(buffer))])
            targets = correct_logit_average(logits, y[idx])
        return SyntheticSet(images, targets, lr=self.lr_teacher, learn_targets=self.soft_labels, learn_lr=self.learn_lr)

    def distill(self, module: nn.Module, buffer: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                generator: torch.Generator, log: Callable[[dict, int], None] | None = None,
                initial: SyntheticSet | None = None):
        """(SyntheticSet, stats) after `iterations` matching steps; stats: mean loss, share updated.
        `initial`: the set to start from (`initial_set`'s, drawn by the caller with the same generator
        first, so the draw is the same); it is updated in place."""
        self.check_buffer(buffer, module)
        syn = self.initial_set(module, buffer, x, y, generator) if initial is None else initial
        opts = [torch.optim.SGD([syn.images], lr=self.lr_img, momentum=0.5)]
        if self.learn_lr:
            opts.append(torch.optim.SGD([syn.lr], lr=self.lr_lr, momentum=0.5))
        if self.soft_labels:
            opts.append(torch.optim.SGD([syn.targets], lr=self.lr_y, momentum=self.momentum_y))
        batch = self.batch_syn or len(syn)
        losses, updated = [], 0
        for it in range(self.iterations):
            e = int(torch.randint(len(buffer), (1,), generator=generator))
            t = sample_start_epoch(it, generator, self.min_start, self.max_start, self.current_max_start,
                                   self.expansion_end)
            loss, _ = matching_loss(module, syn, buffer[e], t, self.expert_epochs, self.syn_steps, batch, generator)
            for o in opts:
                o.zero_grad(set_to_none=True)
            loss.backward()
            value = float(loss.detach())
            if not math.isfinite(value):
                raise FloatingPointError(f"matching loss is {value} at iteration {it}: lower lr_img or lr_lr")
            if value <= self.threshold:
                for o in opts:
                    o.step()
                updated += 1
            losses.append(value)
            if log is not None:
                log({"loss": value, "syn_lr": float(syn.lr.detach()), "start_epoch": t}, it)
        stats = {"updated": updated / max(1, self.iterations), "syn_lr": float(syn.lr.detach())}
        if losses:
            stats["match_loss"] = sum(losses) / len(losses)
        return syn, stats
