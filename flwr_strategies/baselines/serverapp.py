"""FedAvg, FedProx, FedAdam and FedSAM as Message-API strategies (run by Flower's ``start()``).

Each takes Flower's Message-API ``FedAvg`` arguments (:class:`~flwr_strategies.adapters.MessageStrategy`)
and the hyperparameters of the legacy class of the same name (:mod:`.strategy`).
"""

from __future__ import annotations

from ..adapters import MessageStrategy
from .config import FedAdamConfig, FedProxConfig
from .server import FedAdamServer, FedAvgServer, FedProxServer

__all__ = ["FedAvg", "FedProx", "FedAdam", "FedSAM"]


class FedAvg(MessageStrategy):
    """FedAvg (McMahan et al., AISTATS 2017) on the Message API; as :class:`flwr_strategies.FedAvg`."""

    core_cls = FedAvgServer


class FedProx(MessageStrategy):
    """FedProx (Li et al., MLSys 2020) on the Message API; ``proximal_mu`` as :class:`flwr_strategies.FedProx`."""

    core_cls = FedProxServer
    hyperparameters = {"config": FedProxConfig}


class FedAdam(MessageStrategy):
    """FedAdam (Reddi et al., ICLR 2021) on the Message API; ``eta``, ``beta_1``, ``beta_2``, ``tau``
    as :class:`flwr_strategies.FedAdam`."""

    core_cls = FedAdamServer
    hyperparameters = {"config": FedAdamConfig}


class FedSAM(MessageStrategy):
    """FedSAM on the Message API: FedAvg's server, SAM local steps on the clients."""

    core_cls = FedAvgServer
