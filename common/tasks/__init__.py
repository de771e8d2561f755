"""Run templates around the one Trainer: a method's `run(cfg, ctx)` builds model, data and
evaluation and hands them to one of these (DESIGN.md section 3)."""
from common.tasks.base import fit_and_evaluate
from common.tasks.classify import classify
from common.tasks.contrastive import contrastive, evaluation_splits, frozen_feature_metrics
from common.tasks.regress import regress

__all__ = ["classify", "contrastive", "evaluation_splits", "fit_and_evaluate", "frozen_feature_metrics", "regress"]
