"""One evaluation harness (DESIGN.md section 2): every protocol a table reports, on top of
scikit-learn and scipy. Knobs (probe iterations, k, temperature, batch sizes) come from the
run's `eval:` config group; none of them has a default hidden here."""
from common.eval.anomaly import auprc, auroc
from common.eval.classification import accuracy, macro_f1, model_accuracy, predict
from common.eval.clustering import cluster_accuracy, cluster_metrics, match_clusters, nmi, ari
from common.eval.features import extract
from common.eval.knn import knn_accuracy
from common.eval.language import perplexity
from common.eval.probe import linear_probe
from common.eval.regression import mae, mean_nll
from common.eval.sets import jaccard, set_scores

__all__ = ["accuracy", "ari", "auprc", "auroc", "cluster_accuracy", "cluster_metrics", "extract", "jaccard",
           "knn_accuracy", "linear_probe", "mae", "macro_f1", "match_clusters", "mean_nll", "model_accuracy",
           "nmi", "perplexity", "predict", "set_scores"]
