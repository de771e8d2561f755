"""The stages of a data-free pruning experiment, as plain functions that `run` calls in order:
train a network once, then prune copies of it (one group at a time, plain vs fused) and
measure test accuracy — no fine-tuning after pruning (the paper's Section 4.1 protocol)."""
from __future__ import annotations

import copy

import torch
from torch import nn

from common.data.transforms import to_float
from common.eval import model_accuracy
from methods.intra_fusion.prune import fold_batchnorm, ordered_groups, output_layer, prune

FASHION_MEAN, FASHION_STD = 0.2860, 0.3530


def standardise_fashion(images: torch.Tensor) -> torch.Tensor:
    """uint8 (N, C, H, W) -> float32 standardised by Fashion-MNIST's mean and std."""
    return (to_float(images) - FASHION_MEAN) / FASHION_STD


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1000) -> float:
    """Top-1 accuracy in percent, eval mode (common.eval)."""
    model.eval()
    return model_accuracy(model, (x, y), batch_size, next(model.parameters()).device)


def calibration_batches(x: torch.Tensor, y: torch.Tensor, batches: int = 4, batch_size: int = 64,
                        seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`batches` random training batches for the Taylor importance's backward."""
    idx = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[: batches * batch_size]
    return [(x[i], y[i]) for i in idx.split(batch_size)]


def group_count(model: nn.Module, example_inputs: torch.Tensor) -> int:
    """Number of prunable groups (the classifier excluded) of `model`."""
    import torch_pruning as tp

    folded = fold_batchnorm(copy.deepcopy(model).eval())
    graph = tp.DependencyGraph().build_dependency(folded, example_inputs=example_inputs)
    return len(ordered_groups(graph, folded, [output_layer(folded)]))


def pruned_copy(model: nn.Module, example_inputs: torch.Tensor, group: int, sparsity: float, importance: str,
                fuse: bool, calibration=None, **fusion) -> nn.Module:
    """A copy of `model` with one group pruned (the model itself is left alone)."""
    return prune(copy.deepcopy(model), example_inputs, sparsity, importance=importance, fuse=fuse, groups=[group],
                 calibration=calibration, **fusion)


def sweep(model: nn.Module, x_test: torch.Tensor, y_test: torch.Tensor, example_inputs: torch.Tensor,
          groups, cells, calibration=None, seed: int = 0, batch_size: int = 1000,
          device: torch.device | str | None = None) -> dict[str, list[float]]:
    """Test accuracy of each pruned variant, per group.

    cells: {name: dict(sparsity=…, importance=…, fuse=…, [normalization=…, source_mass=…, …])}.
    Returns {name: [accuracy of group g for g in groups]}; 'random' importance is reseeded per
    cell and group so plain and fused runs see the same scores. Pruning runs on the CPU (where
    `model` is); `device` (default: there too) is where each pruned copy is evaluated.
    """
    out: dict[str, list[float]] = {name: [] for name in cells}
    for g in groups:
        for name, cell in cells.items():
            torch.manual_seed(seed * 1000 + g)
            net = pruned_copy(model, example_inputs, g, calibration=calibration, **cell)
            if device is not None:
                net = net.to(device)
            out[name].append(accuracy(net, x_test, y_test, batch_size))
    return out


def mini_cells(sparsities=(30, 50, 70), taylor_sparsities=(70,), official_sparsity: int | None = 70,
               random_sparsities=()) -> dict[str, dict]:
    """The table's columns (sparsities in percent): prune_/fuse_l1_{s} for each of `sparsities`,
    prune_/fuse_taylor_{s} for each of `taylor_sparsities`, fuse_l1_{s}_official (the official
    merge normalisation) at `official_sparsity` (None: no such column), and fuse_l1_{s}_random
    (the random-neuron merge control, `prune.fuse_group(cost='random')`) for each of
    `random_sparsities`."""
    cells = {}
    for s in sparsities:
        cells[f"prune_l1_{s}"] = dict(sparsity=s / 100, importance="l1", fuse=False)
        cells[f"fuse_l1_{s}"] = dict(sparsity=s / 100, importance="l1", fuse=True)
    for s in taylor_sparsities:
        cells[f"prune_taylor_{s}"] = dict(sparsity=s / 100, importance="taylor", fuse=False)
        cells[f"fuse_taylor_{s}"] = dict(sparsity=s / 100, importance="taylor", fuse=True)
    if official_sparsity is not None:
        cells[f"fuse_l1_{official_sparsity}_official"] = dict(sparsity=official_sparsity / 100, importance="l1",
                                                              fuse=True, normalization="official")
    for s in random_sparsities:
        cells[f"fuse_l1_{s}_random"] = dict(sparsity=s / 100, importance="l1", fuse=True, cost="random")
    return cells


VARIANTS = {"official": "official", "random": "randmerge"}


def subrow_name(cell: str, group: int) -> str:
    """A cell of one group as a sub-row metric `<variant>_g<group>/<importance>_<sparsity>`:
    prune_l1_70 -> prune_g1/l1_70, fuse_taylor_70 -> fuse_g1/taylor_70, fuse_l1_70_official ->
    official_g1/l1_70, fuse_l1_70_random -> randmerge_g1/l1_70 (rows of the paper's per-group tables)."""
    parts = cell.split("_")
    if len(parts) not in (3, 4) or parts[0] not in ("prune", "fuse") or (len(parts) == 4 and parts[3] not in VARIANTS):
        raise ValueError(f"not a cell name: '{cell}'")
    variant = VARIANTS[parts[3]] if len(parts) == 4 else parts[0]
    return f"{variant}_g{group}/{parts[1]}_{parts[2]}"


def fit_dense(ctx, model: nn.Module, batches, x_val: torch.Tensor | None, y_val: torch.Tensor | None,
              patience: int | None, batch_size: int = 1000):
    """The shared Trainer for the dense network (the caller fits it). With validation images,
    evaluate every `trainer.eval_every` steps, keep the best weights by validation accuracy and
    stop after `patience` evaluations without a gain (training until the validation accuracy
    plateaus; `trainer.max_steps` caps it). Returns the Trainer."""
    callbacks = ()
    eval_fn = None
    if x_val is not None:
        from common.callbacks import BestOnValidation

        if not ctx.cfg.trainer.eval_every:
            raise ValueError("method.dense_val.size > 0 needs trainer.eval_every > 0 (when to validate)")
        eval_fn = lambda m, step: {"val_acc": accuracy(m, x_val, y_val, batch_size)}   # noqa: E731
        callbacks = (BestOnValidation(model, "val_acc", "max", patience),)
    trainer = ctx.trainer(model, batches, eval_fn=eval_fn, callbacks=callbacks)
    return trainer
