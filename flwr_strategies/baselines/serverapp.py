"""FedAvg, FedProx, FedAdam and FedSAM as Message-API strategies (run by Flower's ``start()``).

Each takes Flower's Message-API ``FedAvg`` arguments (:class:`~flwr_strategies.adapters.MessageStrategy`)
and the hyperparameters of the legacy class of the same name (:mod:`.strategy`).
"""

from __future__ import annotations

from ..adapters import MessageStrategy
from . import strategy as legacy

__all__ = ["FedAvg", "FedProx", "FedAdam", "FedSAM"]


class FedAvg(MessageStrategy, like=legacy.FedAvg):
    """FedAvg (McMahan et al., AISTATS 2017) on the Message API; as :class:`flwr_strategies.FedAvg`."""


class FedProx(MessageStrategy, like=legacy.FedProx):
    """FedProx (Li et al., MLSys 2020) on the Message API; ``proximal_mu`` as :class:`flwr_strategies.FedProx`."""


class FedAdam(MessageStrategy, like=legacy.FedAdam):
    """FedAdam (Reddi et al., ICLR 2021) on the Message API; ``eta``, ``beta_1``, ``beta_2``, ``tau``
    as :class:`flwr_strategies.FedAdam`."""


class FedSAM(MessageStrategy, like=legacy.FedSAM):
    """FedSAM on the Message API: FedAvg's server, SAM local steps on the clients."""
