"""Registrations: ``fedavg``, ``fedprox`` and ``fedadam`` (cores in :mod:`.server`)."""

from __future__ import annotations

from ..registry import MethodSpec, register_method
from ..setup import ServerSetup
from .config import FedAdamConfig, FedProxConfig
from .server import FedAdamServer, FedAvgServer, FedProxServer


def core_kwargs(setup: ServerSetup) -> dict:
    """:class:`~flwr_strategies.core.server.ServerCore` arguments of a centralized method."""
    return {
        "num_partitions": setup.num_clients,
        "fraction_train": setup.fraction_fit,
        "min_train": setup.clients_per_round,
        "seed": setup.seed,
        "on_train_config": setup.fit_config,
    }


def _fedavg(setup: ServerSetup, params: dict) -> FedAvgServer:
    return FedAvgServer(setup.initial_parameters, **core_kwargs(setup))


def _fedprox(setup: ServerSetup, params: dict) -> FedProxServer:
    return FedProxServer(setup.initial_parameters, config=FedProxConfig(proximal_mu=float(params["proximal_mu"])),
                         **core_kwargs(setup))


def _fedadam(setup: ServerSetup, params: dict) -> FedAdamServer:
    config = FedAdamConfig(eta=float(params["eta"]), beta_1=float(params["beta_1"]), beta_2=float(params["beta_2"]),
                           tau=float(params["tau"]))
    return FedAdamServer(setup.initial_parameters, config=config, **core_kwargs(setup))


register_method(MethodSpec(
    name="fedavg",
    summary="FedAvg: average of locally trained models, weighted by examples",
    paper="McMahan et al., AISTATS 2017",
    strategy="flwr_strategies.baselines.strategy:FedAvg",
    build_core=_fedavg,
    client="flwr_strategies.clients.base:build_torch_client",
))
register_method(MethodSpec(
    name="fedprox",
    summary="FedProx: FedAvg with a proximal term mu/2||w-w_g||^2 in local training (mu=0.01)",
    paper="Li et al., MLSys 2020",
    strategy="flwr_strategies.baselines.strategy:FedProx",
    build_core=_fedprox,
    client="flwr_strategies.clients.fedprox:build_fedprox_client",
))
register_method(MethodSpec(
    name="fedadam",
    summary="FedAdam: Adam on the server over the averaged update (eta=0.01, tau=1e-3)",
    paper="Reddi et al., ICLR 2021",
    strategy="flwr_strategies.baselines.strategy:FedAdam",
    build_core=_fedadam,
    client="flwr_strategies.clients.base:build_torch_client",
))
