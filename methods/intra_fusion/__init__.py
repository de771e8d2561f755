"""Intra-Fusion: meta-pruning via optimal transport (ICLR 2024). See README.md."""
from __future__ import annotations

from pathlib import Path

import torch
from hydra.utils import instantiate

from common import data

from methods.intra_fusion.model import CNN, MLP, NETWORKS, build_network
from methods.intra_fusion.networks import VGG, VGG11, ResNet18
from methods.intra_fusion.recipe import crop_flip, dense_checkpoint, load_dense, standardise, use_step_decay
from methods.intra_fusion.prune import (COSTS, IMPORTANCES, fold_batchnorm, fuse_group, group_importance,
                                        ordered_groups, output_layer, prune)
from methods.intra_fusion.stages import (accuracy, calibration_batches, fit_dense, group_count, mini_cells,
                                         standardise_fashion, subrow_name, sweep)
from methods.intra_fusion.transport import (MASSES, NORMALIZATIONS, fuse_layer, keep_indices, kept_count, masses,
                                            merge, merge_incoming, merge_outgoing, neuron_cost, transport_plan)



def build(cfg):
    """The network to train and prune, from the config alone."""
    ds = cfg.dataset
    return instantiate(cfg.method.model, in_chans=ds.in_chans, img_size=ds.img_size, num_classes=ds.num_classes)


def run(cfg, ctx) -> dict[str, float]:
    """Train the network once (shared Trainer; or load `method.dense_checkpoint`), then prune copies
    of it one group at a time, plain vs Intra-Fusion, without fine-tuning: `dense_acc` and each
    cell's test accuracy averaged over the groups (prune_/fuse_l1_{s}, prune_/fuse_taylor_{s},
    fuse_l1_{s}_official, fuse_l1_{s}_random), and per group as `<cell>_g<g>` when `method.per_group`;
    with `method.subrows` each group's cells instead as sub-rows `<variant>_g<g>/<importance>_<s>`
    (variants prune, fuse, official, randmerge), no averages. With `method.dense_val.size` the last
    training images validate the dense training (best weights, early stop: `stages.fit_dense`)."""
    m = cfg.method
    splits = data.image_splits(cfg.dataset)
    norm, aug = m.normalize, m.augment
    prep = (lambda im: standardise(im, list(norm.mean), list(norm.std))) if norm is not None else standardise_fashion
    x_raw, y = splits["train"]
    val_size = int(m.dense_val.size)
    x_val = y_val = None
    if val_size > 0:                          # the last val_size training images: validation, never trained on
        if val_size >= len(y):
            raise ValueError(f"method.dense_val.size={val_size} leaves no training images (train_size {len(y)})")
        x_val, y_val = prep(x_raw[-val_size:]), y[-val_size:]
        x_raw, y = x_raw[:-val_size], y[:-val_size]
    x = prep(x_raw)
    x_test, y_test = prep(splits["test"][0]), splits["test"][1]
    model = build(cfg)
    ck = m.dense_checkpoint
    dense_steps = None
    if ck.path or ck.url:                     # the official (or any) dense weights: no training
        load_dense(model, dense_checkpoint(ck.path, ck.url, ck.sha256, Path(cfg.dataset.root) / "intra_fusion"))
        ctx.last_step = 0
    else:
        sampler = ctx.sampler(len(y))
        augmenting = aug.crop_padding > 0 or aug.flip

        def batches(step: int):
            idx = sampler(step)
            if not augmenting:
                return x[idx].to(ctx.device), y[idx].to(ctx.device)
            gen = torch.Generator().manual_seed(ctx.seed * 1_000_003 + step)   # a pure function of the step
            images = crop_flip(x_raw[idx].to(ctx.device), aug.crop_padding, aug.flip, gen)
            return prep(images), y[idx].to(ctx.device)

        trainer = fit_dense(ctx, model, batches, x_val, y_val, m.dense_val.patience, cfg.eval.batch_size)
        if m.lr_decay is not None:
            use_step_decay(trainer, m.lr_decay.factor, m.lr_decay.every_steps, cfg.trainer.schedule.name,
                           cfg.trainer.schedule.warmup_steps)
        trainer.fit(resume=ctx.resume)
        ctx.last_step = trainer.step
        if val_size > 0:                      # the step whose weights were kept, and their validation accuracy
            best = trainer.callbacks[0]
            dense_steps, dense_val = best.best_step, best.best
    model = model.cpu().eval()                 # pruning (Torch-Pruning, POT) runs on the CPU
    eval_bs = cfg.eval.batch_size
    out = {"dense_acc": accuracy(model.to(ctx.device), x_test, y_test, eval_bs)}
    model = model.cpu()
    example = x[:1]
    groups = list(range(group_count(model, example))) if m.groups is None else list(m.groups)
    calib = calibration_batches(x, y, m.calibration.batches, m.calibration.batch_size, seed=ctx.seed)
    pct = lambda f: round(100 * f)          # noqa: E731  (0.7 -> the column name's 70)
    official = None if m.official_sparsity is None else pct(m.official_sparsity)
    cells = mini_cells(tuple(pct(f) for f in m.sparsities), tuple(pct(f) for f in m.taylor_sparsities), official,
                       tuple(pct(f) for f in m.random_sparsities))
    fusion = dict(m.fusion)
    for cell in cells.values():
        if cell["fuse"]:
            cell.update(fusion)
    per_group = sweep(model, x_test, y_test, example, groups, cells, calibration=calib, seed=ctx.seed,
                      batch_size=eval_bs, device=ctx.device)
    for name, accs in per_group.items():
        if not m.subrows:
            out[name] = sum(accs) / len(accs)
        for g, a in zip(groups, accs):
            ctx.log({f"{name}/group{g}": a})
            if m.subrows:
                out[subrow_name(name, g)] = a
            elif m.per_group:
                out[f"{name}_g{g}"] = a
    out["groups"] = float(len(groups))
    if dense_steps is not None:
        out["dense_steps"], out["dense_val_acc"] = float(dense_steps), float(dense_val)
    return out


__all__ = ["CNN", "COSTS", "IMPORTANCES", "MASSES", "MLP", "NETWORKS", "NORMALIZATIONS", "ResNet18", "VGG", "VGG11",
           "build", "build_network", "crop_flip", "dense_checkpoint", "fold_batchnorm", "fuse_group", "fuse_layer",
           "group_importance", "keep_indices", "kept_count", "load_dense", "masses", "merge", "merge_incoming",
           "merge_outgoing", "neuron_cost", "ordered_groups", "output_layer", "prune", "run", "standardise",
           "transport_plan", "use_step_decay"]
