"""LRR: Masks, Signs, and Learning Rate Rewinding (Gadhikar & Burkholz, ICLR 2024). See README.md."""
from __future__ import annotations

from hydra.utils import instantiate

from common import data
from common.config import UserError

from methods.lrr.model import LeNet300100, ResNetClassifier
from methods.lrr.pruning import (apply_masks, global_magnitude_masks, keep_masked, measured_sparsity,
                                 prunable_weights, random_masks, sign_flip_fraction, sparsity_schedule)
from methods.lrr.rounds import MASK_FNS, METHODS, iterative_pruning, rewind_to, sign_experiment
from methods.lrr.stages import (ROUND_EPOCHS, Snapshot, pruning_experiment, round_steps, single_neuron_experiment,
                                standardize)
from methods.lrr.theory import (gradient_descent, single_neuron_compare, single_neuron_data, single_neuron_grads,
                                single_neuron_loss, single_neuron_run)
from methods.lrr.train import accuracy, to_inputs, train_sgd

EXPERIMENTS = ("pruning", "single_neuron")


def build(cfg):
    """The network of the pruning experiment, from the config alone: LeNet-300-100 when
    `method.backbone` is null, else the backbone (a CIFAR ResNet) under a linear head."""
    ds = cfg.dataset
    if cfg.method.backbone is None:
        return instantiate(cfg.method.model, in_features=ds.in_chans * ds.img_size ** 2, num_classes=ds.num_classes)
    encoder, dim = instantiate(cfg.method.backbone, in_chans=ds.in_chans, img_size=ds.img_size)
    return instantiate(cfg.method.model, encoder=encoder, feat_dim=dim, num_classes=ds.num_classes)


def run(cfg, ctx) -> dict[str, float]:
    """`method.experiment`: 'pruning' (a dense round, then IMP or LRR rounds on Fashion-MNIST;
    test accuracy, sign flips, the sign experiment) or 'single_neuron' (Section 2's theorem over
    many random inits, no training data)."""
    m = cfg.method
    if m.experiment not in EXPERIMENTS:
        raise UserError(f"method.experiment must be one of {EXPERIMENTS}, got '{m.experiment}'", exit_code=2)
    if m.procedure not in METHODS or m.mask_fn not in MASK_FNS or m.round_epochs not in ROUND_EPOCHS:
        raise UserError(f"method.procedure must be one of {METHODS}, method.mask_fn one of {MASK_FNS} and "
                        f"method.round_epochs one of {ROUND_EPOCHS}, got '{m.procedure}', '{m.mask_fn}' and "
                        f"'{m.round_epochs}'", exit_code=2)
    if m.experiment == "single_neuron":
        return single_neuron_experiment(ctx.seed, m.procedure, **m.single_neuron)
    splits = data.image_splits(cfg.dataset)
    train, test = standardize(splits["train"], splits["test"])
    return pruning_experiment(ctx, build(cfg), train, test, procedure=m.procedure, mask_fn=m.mask_fn,
                              num_rounds=m.num_rounds, prune_fraction=m.prune_fraction,
                              rewind_steps=m.rewind_steps, sign_experiment=m.sign_experiment,
                              eval_batch_size=cfg.eval.batch_size, round_epochs=m.round_epochs)


__all__ = ["EXPERIMENTS", "ROUND_EPOCHS", "round_steps", "LeNet300100", "ResNetClassifier", "standardize", "MASK_FNS", "METHODS", "Snapshot", "accuracy", "build", "pruning_experiment", "run", "single_neuron_experiment", "apply_masks", "global_magnitude_masks",
           "gradient_descent", "iterative_pruning", "keep_masked", "measured_sparsity", "prunable_weights",
           "random_masks", "rewind_to", "sign_experiment", "sign_flip_fraction", "single_neuron_compare",
           "single_neuron_data", "single_neuron_grads", "single_neuron_loss", "single_neuron_run",
           "sparsity_schedule", "to_inputs", "train_sgd"]
