"""FedWaD: Federated Wasserstein Distance (Rakotomamonjy, Nadjahi, Ralaivola; ICLR 2024). See README.md."""
from __future__ import annotations

from hydra.utils import instantiate

from common.config import UserError
from methods.fedwad.fedwad import FedWaDResult, fedwad
from methods.fedwad.model import MLP
from methods.fedwad.otdd import augment_with_labels, cluster_clients
from methods.fedwad.transport import bures_wasserstein, interpolate, wasserstein

PARTS = ("gaussians", "otdd", "cluster")


def build(cfg) -> MLP:
    """The classifier each cluster trains in the `cluster` part, from the config alone."""
    return instantiate(cfg.method.model)


def run(cfg, ctx) -> dict[str, float]:
    """`method.part`: gaussians (FedWaD vs the exact W_2), otdd (federated OTDD between
    Fashion-MNIST clients) or cluster (FedAvg per cluster of clients, through
    common.tasks.federated). Every row of the part's table as `<row>/<metric>`."""
    from common.tasks.federated import check_federated
    from methods.fedwad.cluster import run_cluster
    from methods.fedwad.parts import run_gaussians, run_otdd

    m = cfg.method
    if m.part not in PARTS:
        raise UserError(f"method.part must be one of {', '.join(PARTS)}, got {m.part!r}", exit_code=2)
    check_federated(m.federated)
    estimator = instantiate(m.estimator)
    if m.part == "gaussians":
        return run_gaussians(estimator, m.gaussians, ctx.seed, ctx.log)
    if m.part == "otdd":
        return run_otdd(estimator, m.otdd, m.federated, cfg.dataset, ctx.seed, ctx.log)
    return run_cluster(ctx, cfg, instantiate(m.estimator, **m.cluster.estimator))


__all__ = ["FedWaDResult", "MLP", "PARTS", "augment_with_labels", "bures_wasserstein", "build", "cluster_clients",
           "fedwad", "interpolate", "run", "wasserstein"]
