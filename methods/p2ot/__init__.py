"""P²OT: progressive partial optimal transport for deep imbalanced clustering (ICLR 2024).
See README.md. The stages of a run are plain functions in `stages`; `run(cfg, ctx)` comes
with the framework step."""
from methods.p2ot.data import long_tailed_counts, long_tailed_indices
from methods.p2ot.loss import soft_cross_entropy, swapped_label_loss
from methods.p2ot.metrics import cluster_metrics, hungarian_match, sorted_sizes
from methods.p2ot.model import ClusterHead, CosineHead, LogitsMemory
from methods.p2ot.stages import (evaluate_clusters, kmeans_clusters, plain_features, predict_clusters,
                                 train_head, view_features)
from methods.p2ot.transport import (AugmentedSolution, p2ot_objective, pseudo_labels, rho_schedule,
                                    solve_augmented, solve_p2ot)

__all__ = ["AugmentedSolution", "ClusterHead", "CosineHead", "LogitsMemory", "cluster_metrics",
           "evaluate_clusters", "hungarian_match", "kmeans_clusters", "long_tailed_counts",
           "long_tailed_indices", "p2ot_objective", "plain_features", "predict_clusters",
           "pseudo_labels", "rho_schedule", "soft_cross_entropy", "solve_augmented", "solve_p2ot",
           "sorted_sizes", "swapped_label_loss", "train_head", "view_features"]
