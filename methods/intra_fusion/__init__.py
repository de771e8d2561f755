"""Intra-Fusion: meta-pruning via optimal transport (ICLR 2024). See README.md."""
from __future__ import annotations

from hydra.utils import instantiate

from common import data

from methods.intra_fusion.model import CNN, MLP, NETWORKS, build_network
from methods.intra_fusion.prune import (IMPORTANCES, fold_batchnorm, fuse_group, group_importance, ordered_groups,
                                        output_layer, prune)
from methods.intra_fusion.stages import accuracy, calibration_batches, group_count, mini_cells, sweep, to_float
from methods.intra_fusion.transport import (MASSES, NORMALIZATIONS, fuse_layer, keep_indices, kept_count, masses,
                                            merge, merge_incoming, merge_outgoing, neuron_cost, transport_plan)



def build(cfg):
    """The network to train and prune, from the config alone."""
    ds = cfg.dataset
    return instantiate(cfg.method.model, in_chans=ds.in_chans, img_size=ds.img_size, num_classes=ds.num_classes)


def run(cfg, ctx) -> dict[str, float]:
    """Train the network once (shared Trainer), then prune copies of it one group at a time,
    plain vs Intra-Fusion, without fine-tuning: `dense_acc` and each cell's test accuracy
    averaged over the groups (prune_/fuse_l1_{s}, prune_/fuse_taylor_{s}, fuse_l1_{s}_official)."""
    m = cfg.method
    splits = data.image_splits(cfg.dataset)
    x, y = to_float(splits["train"][0]), splits["train"][1]
    x_test, y_test = to_float(splits["test"][0]), splits["test"][1]
    model = build(cfg)
    sampler = ctx.sampler(len(y))

    def batches(step: int):
        idx = sampler(step)
        return x[idx].to(ctx.device), y[idx].to(ctx.device)

    trainer = ctx.trainer(model, batches)
    trainer.fit(resume=ctx.resume)
    ctx.last_step = trainer.step
    model = model.cpu().eval()                 # pruning (Torch-Pruning, POT) runs on the CPU
    eval_bs = cfg.eval.batch_size
    out = {"dense_acc": accuracy(model, x_test, y_test, eval_bs)}
    example = x[:1]
    groups = list(range(group_count(model, example))) if m.groups is None else list(m.groups)
    calib = calibration_batches(x, y, m.calibration.batches, m.calibration.batch_size, seed=ctx.seed)
    pct = lambda f: round(100 * f)          # noqa: E731  (0.7 -> the column name's 70)
    cells = mini_cells(tuple(pct(f) for f in m.sparsities), pct(m.taylor_sparsity), pct(m.official_sparsity))
    fusion = dict(m.fusion)
    for cell in cells.values():
        if cell["fuse"]:
            cell.update(fusion)
    per_group = sweep(model, x_test, y_test, example, groups, cells, calibration=calib, seed=ctx.seed,
                      batch_size=eval_bs)
    for name, accs in per_group.items():
        out[name] = sum(accs) / len(accs)
        for g, a in zip(groups, accs):
            ctx.log({f"{name}/group{g}": a})
    out["groups"] = float(len(groups))
    return out


__all__ = ["CNN", "IMPORTANCES", "MASSES", "MLP", "NETWORKS", "NORMALIZATIONS", "build", "build_network", "run", "fold_batchnorm", "fuse_group", "fuse_layer",
           "group_importance", "keep_indices", "kept_count", "masses", "merge", "merge_incoming", "merge_outgoing",
           "neuron_cost", "ordered_groups", "output_layer", "prune", "transport_plan"]
