"""Intra-Fusion: meta-pruning via optimal transport (ICLR 2024). See README.md."""
from __future__ import annotations

from methods.intra_fusion.model import CNN, MLP
from methods.intra_fusion.prune import (IMPORTANCES, fold_batchnorm, fuse_group, group_importance, ordered_groups,
                                        output_layer, prune)
from methods.intra_fusion.transport import (MASSES, NORMALIZATIONS, fuse_layer, keep_indices, kept_count, masses,
                                            merge, merge_incoming, merge_outgoing, neuron_cost, transport_plan)

__all__ = ["CNN", "IMPORTANCES", "MASSES", "MLP", "NORMALIZATIONS", "fold_batchnorm", "fuse_group", "fuse_layer",
           "group_importance", "keep_indices", "kept_count", "masses", "merge", "merge_incoming", "merge_outgoing",
           "neuron_cost", "ordered_groups", "output_layer", "prune", "transport_plan"]
