"""Intra-Fusion: meta-pruning via optimal transport (ICLR 2024). See README.md."""
from __future__ import annotations

from pathlib import Path

import torch
from hydra.utils import instantiate

from common import data

from methods.intra_fusion.model import CNN, MLP, NETWORKS, build_network
from methods.intra_fusion.networks import VGG, VGG11, ResNet18
from methods.intra_fusion.recipe import crop_flip, dense_checkpoint, load_dense, standardise, use_step_decay
from methods.intra_fusion.prune import (IMPORTANCES, fold_batchnorm, fuse_group, group_importance, ordered_groups,
                                        output_layer, prune)
from methods.intra_fusion.stages import accuracy, calibration_batches, group_count, mini_cells, standardise_fashion, sweep
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
    fuse_l1_{s}_official), and per group as `<cell>_g<g>` when `method.per_group`."""
    m = cfg.method
    splits = data.image_splits(cfg.dataset)
    norm, aug = m.normalize, m.augment
    prep = (lambda im: standardise(im, list(norm.mean), list(norm.std))) if norm is not None else standardise_fashion
    x_raw, y = splits["train"]
    x = prep(x_raw)
    x_test, y_test = prep(splits["test"][0]), splits["test"][1]
    model = build(cfg)
    ck = m.dense_checkpoint
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

        trainer = ctx.trainer(model, batches)
        if m.lr_decay is not None:
            use_step_decay(trainer, m.lr_decay.factor, m.lr_decay.every_steps, cfg.trainer.schedule.name,
                           cfg.trainer.schedule.warmup_steps)
        trainer.fit(resume=ctx.resume)
        ctx.last_step = trainer.step
    model = model.cpu().eval()                 # pruning (Torch-Pruning, POT) runs on the CPU
    eval_bs = cfg.eval.batch_size
    out = {"dense_acc": accuracy(model.to(ctx.device), x_test, y_test, eval_bs)}
    model = model.cpu()
    example = x[:1]
    groups = list(range(group_count(model, example))) if m.groups is None else list(m.groups)
    calib = calibration_batches(x, y, m.calibration.batches, m.calibration.batch_size, seed=ctx.seed)
    pct = lambda f: round(100 * f)          # noqa: E731  (0.7 -> the column name's 70)
    official = None if m.official_sparsity is None else pct(m.official_sparsity)
    cells = mini_cells(tuple(pct(f) for f in m.sparsities), tuple(pct(f) for f in m.taylor_sparsities), official)
    fusion = dict(m.fusion)
    for cell in cells.values():
        if cell["fuse"]:
            cell.update(fusion)
    per_group = sweep(model, x_test, y_test, example, groups, cells, calibration=calib, seed=ctx.seed,
                      batch_size=eval_bs, device=ctx.device)
    for name, accs in per_group.items():
        out[name] = sum(accs) / len(accs)
        for g, a in zip(groups, accs):
            ctx.log({f"{name}/group{g}": a})
            if m.per_group:
                out[f"{name}_g{g}"] = a
    out["groups"] = float(len(groups))
    return out


__all__ = ["CNN", "IMPORTANCES", "MASSES", "MLP", "NETWORKS", "NORMALIZATIONS", "ResNet18", "VGG", "VGG11", "build",
           "build_network", "crop_flip", "dense_checkpoint", "fold_batchnorm", "fuse_group", "fuse_layer",
           "group_importance", "keep_indices", "kept_count", "load_dense", "masses", "merge", "merge_incoming",
           "merge_outgoing", "neuron_cost", "ordered_groups", "output_layer", "prune", "run", "standardise",
           "transport_plan", "use_step_decay"]
