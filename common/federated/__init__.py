"""The federated floor: client partitions, seeded client sampling, FedAvg rounds with
checkpoint and resume. Import by full path (`from common.federated import federated_fit`); the
run template is `common.tasks.federated.federated`."""
from common.federated.fedavg import WEIGHTINGS, fedavg, federated_fit
from common.federated.partition import dirichlet_partition, label_split, split_by_proportions
from common.federated.sampling import client_batches, client_seed, pick_clients, sample_clients

__all__ = ["WEIGHTINGS", "client_batches", "client_seed", "dirichlet_partition", "fedavg", "federated_fit",
           "label_split", "pick_clients", "sample_clients", "split_by_proportions"]
