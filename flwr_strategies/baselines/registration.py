"""Registrations: ``fedavg``, ``fedprox`` and ``fedadam`` (cores in :mod:`.server`)."""

from __future__ import annotations

from ..registry import MethodSpec, register_method

_CLIENTS = "flwr_strategies.clients."

#: ``(name, summary, paper, strategy class, client factory)``.
METHODS = (
    ("fedavg", "FedAvg: average of locally trained models, weighted by examples", "McMahan et al., AISTATS 2017",
     "FedAvg", "base:TorchClient"),
    ("fedprox", "FedProx: FedAvg with a proximal term mu/2||w-w_g||^2 in local training (mu=0.01)",
     "Li et al., MLSys 2020", "FedProx", "fedprox:FedProxClient"),
    ("fedadam", "FedAdam: Adam on the server over the averaged update (eta=0.01, tau=1e-3)", "Reddi et al., ICLR 2021",
     "FedAdam", "base:TorchClient"),
)

for _name, _summary, _paper, _strategy, _client in METHODS:
    register_method(MethodSpec(name=_name, summary=_summary, paper=_paper,
                               strategy="flwr_strategies.baselines.strategy:" + _strategy, client=_CLIENTS + _client))
