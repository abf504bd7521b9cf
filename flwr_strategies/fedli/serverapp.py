"""FedLi-LS, FedLi-LU, FedExP and SCAFFOLD as Message-API strategies (run by Flower's ``start()``).

Each takes Flower's Message-API ``FedAvg`` arguments (:class:`~flwr_strategies.adapters.MessageStrategy`)
and the hyperparameters of the legacy class of the same name (:mod:`.strategy`)::

    strategy = FedLiLS(fraction_train=0.1)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(net.state_dict()), num_rounds=100)
"""

from __future__ import annotations

from ..adapters import MessageStrategy
from . import strategy as legacy

__all__ = ["FedLiLS", "FedLiLU", "FedExP", "Scaffold"]


class FedLiLS(MessageStrategy, like=legacy.FedLiLS):
    """FedLi-LS (Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated Learning") on
    the Message API; hyperparameters as :class:`flwr_strategies.FedLiLS`."""


class FedLiLU(MessageStrategy, like=legacy.FedLiLU):
    """FedLi-LU (same paper, Algorithm 2) on the Message API; hyperparameters as
    :class:`flwr_strategies.FedLiLU`."""


class FedExP(MessageStrategy, like=legacy.FedExP):
    """FedExP (Jhunjhunwala, Wang, Joshi, ICLR 2023) on the Message API; hyperparameters as
    :class:`flwr_strategies.FedExP`."""


class Scaffold(MessageStrategy, like=legacy.Scaffold):
    """SCAFFOLD (Karimireddy et al., ICML 2020, option II) on the Message API; hyperparameters as
    :class:`flwr_strategies.Scaffold`. Clients keep ``c_i`` in ``context.state``
    (:class:`flwr_strategies.clients.fedli.ScaffoldSession`)."""
