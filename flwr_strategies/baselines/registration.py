"""Registrations: ``fedavg``, ``fedprox`` and ``fedadam`` (cores in :mod:`.server`)."""

from __future__ import annotations

from ..core.server import ServerCore
from ..registry import MethodSpec, load_object, register_method
from ..setup import ServerSetup

_STRATEGY = "flwr_strategies.baselines.strategy:"


def core_kwargs(setup: ServerSetup) -> dict:
    """:class:`~flwr_strategies.core.server.ServerCore` arguments of a centralized method."""
    return {
        "num_partitions": setup.num_clients,
        "fraction_train": setup.fraction_fit,
        "min_train": setup.clients_per_round,
        "seed": setup.seed,
        "on_train_config": setup.fit_config,
    }


def class_core(strategy: str):
    """``build_core`` of a centralized method: the core of its strategy class (``"module:Class"``) over
    the class's config built from the ``--set`` values (``Class(k=v)``)."""
    def build_core(setup: ServerSetup, params: dict) -> ServerCore:
        cls = load_object(strategy)
        config = {key: config(**params) for key, config in cls.hyperparameters.items()}
        return cls.core_cls(setup.initial_parameters, **config, **core_kwargs(setup))

    return build_core


register_method(MethodSpec(
    name="fedavg",
    summary="FedAvg: average of locally trained models, weighted by examples",
    paper="McMahan et al., AISTATS 2017",
    strategy=_STRATEGY + "FedAvg",
    build_core=class_core(_STRATEGY + "FedAvg"),
    client="flwr_strategies.clients.base:build_torch_client",
))
register_method(MethodSpec(
    name="fedprox",
    summary="FedProx: FedAvg with a proximal term mu/2||w-w_g||^2 in local training (mu=0.01)",
    paper="Li et al., MLSys 2020",
    strategy=_STRATEGY + "FedProx",
    build_core=class_core(_STRATEGY + "FedProx"),
    client="flwr_strategies.clients.fedprox:build_fedprox_client",
))
register_method(MethodSpec(
    name="fedadam",
    summary="FedAdam: Adam on the server over the averaged update (eta=0.01, tau=1e-3)",
    paper="Reddi et al., ICLR 2021",
    strategy=_STRATEGY + "FedAdam",
    build_core=class_core(_STRATEGY + "FedAdam"),
    client="flwr_strategies.clients.base:build_torch_client",
))
