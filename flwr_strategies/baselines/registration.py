"""Registrations: ``fedavg``, ``fedprox`` and ``fedadam`` (cores in :mod:`.server`)."""

from __future__ import annotations

from ..registry import MethodSpec, register_method

_STRATEGY = "flwr_strategies.baselines.strategy:"

register_method(MethodSpec(
    name="fedavg",
    summary="FedAvg: average of locally trained models, weighted by examples",
    paper="McMahan et al., AISTATS 2017",
    strategy=_STRATEGY + "FedAvg",
    client="flwr_strategies.clients.base:build_torch_client",
))
register_method(MethodSpec(
    name="fedprox",
    summary="FedProx: FedAvg with a proximal term mu/2||w-w_g||^2 in local training (mu=0.01)",
    paper="Li et al., MLSys 2020",
    strategy=_STRATEGY + "FedProx",
    client="flwr_strategies.clients.fedprox:build_fedprox_client",
))
register_method(MethodSpec(
    name="fedadam",
    summary="FedAdam: Adam on the server over the averaged update (eta=0.01, tau=1e-3)",
    paper="Reddi et al., ICLR 2021",
    strategy=_STRATEGY + "FedAdam",
    client="flwr_strategies.clients.base:build_torch_client",
))
