"""FedAvg, FedProx and FedAdam: Flower's own strategies, wired to this project's clients.

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
from flwr.server.strategy import FedAdam, FedAvg, FedProx

from clients.base import TorchClient
from clients.fedprox import FedProxClient

from ..registry import MethodSpec, register_method
from ..setup import ClientSetup, ServerSetup
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


def _fedavg(setup: ServerSetup, params: dict) -> FedAvg:
    return FedAvg(**flower_common_kwargs(setup))


def _fedprox(setup: ServerSetup, params: dict) -> FedProx:
    return FedProx(proximal_mu=float(params["proximal_mu"]), **flower_common_kwargs(setup))


def _fedadam(setup: ServerSetup, params: dict) -> FedAdam:
    return FedAdam(
        eta=float(params["eta"]),
        eta_l=setup.train.lr,
        beta_1=float(params["beta_1"]),
        beta_2=float(params["beta_2"]),
        tau=float(params["tau"]),
        **flower_common_kwargs(setup),
    )


def _plain_client(setup: ClientSetup, params: dict) -> TorchClient:
    return TorchClient(setup, params)


def _prox_client(setup: ClientSetup, params: dict) -> FedProxClient:
    return FedProxClient(setup, params)


register_method(
    MethodSpec(
        name="fedavg",
        summary="FedAvg: average of locally trained models, weighted by examples (Flower's FedAvg)",
        paper="McMahan et al., AISTATS 2017",
        defaults={},
        build_strategy=_fedavg,
        build_client=_plain_client,
    )
)
register_method(
    MethodSpec(
        name="fedprox",
        summary="FedProx: FedAvg with a proximal term mu/2||w-w_g||^2 in local training (mu=0.01)",
        paper="Li et al., MLSys 2020",
        defaults={"proximal_mu": 0.01},
        build_strategy=_fedprox,
        build_client=_prox_client,
    )
)
register_method(
    MethodSpec(
        name="fedadam",
        summary="FedAdam: Adam on the server over the averaged update (eta=0.01, tau=1e-3)",
        paper="Reddi et al., ICLR 2021",
        defaults={"eta": 0.01, "beta_1": 0.9, "beta_2": 0.99, "tau": 1e-3},
        build_strategy=_fedadam,
        build_client=_plain_client,
    )
)
