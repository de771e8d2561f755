"""LRR: Masks, Signs, and Learning Rate Rewinding (Gadhikar & Burkholz, ICLR 2024). See README.md."""
from __future__ import annotations

from methods.lrr.model import LeNet300100
from methods.lrr.pruning import (apply_masks, global_magnitude_masks, keep_masked, measured_sparsity,
                                 prunable_weights, random_masks, sign_flip_fraction, sparsity_schedule)
from methods.lrr.rounds import MASK_FNS, METHODS, iterative_pruning, rewind_to, sign_experiment
from methods.lrr.theory import (gradient_descent, single_neuron_compare, single_neuron_data, single_neuron_grads,
                                single_neuron_loss, single_neuron_run)
from methods.lrr.train import accuracy, to_inputs, train_sgd

__all__ = ["LeNet300100", "MASK_FNS", "METHODS", "accuracy", "apply_masks", "global_magnitude_masks",
           "gradient_descent", "iterative_pruning", "keep_masked", "measured_sparsity", "prunable_weights",
           "random_masks", "rewind_to", "sign_experiment", "sign_flip_fraction", "single_neuron_compare",
           "single_neuron_data", "single_neuron_grads", "single_neuron_loss", "single_neuron_run",
           "sparsity_schedule", "to_inputs", "train_sgd"]
