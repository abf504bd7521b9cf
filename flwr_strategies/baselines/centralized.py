"""Transitional helper: Flower legacy-strategy keyword arguments from a ServerSetup.

The FedAvg-family methods themselves are registered in :mod:`.registration` over their cores.

- FedAvg: McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized
  Data", AISTATS 2017.
- FedProx: Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020.
- FedAdam: Reddi et al., "Adaptive Federated Optimization", ICLR 2021.

All three evaluate the global model centrally (``evaluate_fn``) and sample through the client
manager, which the runners make a seeded :class:`~flwr_strategies.sampling.PartitionClientManager`.
"""

from __future__ import annotations

from typing import Any

from flwr.common import ndarrays_to_parameters

from ..setup import ServerSetup
from .metrics import weighted_mean_metrics


def flower_common_kwargs(setup: ServerSetup) -> dict[str, Any]:
    """Constructor arguments shared by Flower's FedAvg-family strategies."""
    return {
        "fraction_fit": setup.fraction_fit,
        "fraction_evaluate": 0.0,
        "min_fit_clients": setup.clients_per_round,
        "min_evaluate_clients": 0,
        "min_available_clients": setup.num_clients,
        "evaluate_fn": setup.evaluate_fn,
        "on_fit_config_fn": setup.fit_config,
        "accept_failures": True,
        "initial_parameters": ndarrays_to_parameters(setup.initial_parameters),
        "fit_metrics_aggregation_fn": weighted_mean_metrics,
    }
