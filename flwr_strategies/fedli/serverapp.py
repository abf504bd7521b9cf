"""FedLi-LS, FedLi-LU, FedExP and SCAFFOLD as Message-API strategies (run by Flower's ``start()``).

Each takes Flower's Message-API ``FedAvg`` arguments (:class:`~flwr_strategies.adapters.MessageStrategy`)
and the hyperparameters of the legacy class of the same name (:mod:`.strategy`)::

    strategy = FedLiLS(fraction_train=0.1)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(net.state_dict()), num_rounds=100)
"""

from __future__ import annotations

from ..adapters import MessageStrategy
from .config import FedExPConfig, FedLiLSConfig, FedLiLUConfig, ScaffoldConfig
from .server import FedExPServer, FedLiLSServer, FedLiLUServer, ScaffoldServer

__all__ = ["FedLiLS", "FedLiLU", "FedExP", "Scaffold"]


class FedLiLS(MessageStrategy):
    """FedLi-LS (Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated Learning") on
    the Message API; hyperparameters as :class:`flwr_strategies.FedLiLS`."""

    core_cls = FedLiLSServer
    hyperparameters = {"config": FedLiLSConfig}


class FedLiLU(MessageStrategy):
    """FedLi-LU (same paper, Algorithm 2) on the Message API; hyperparameters as
    :class:`flwr_strategies.FedLiLU`."""

    core_cls = FedLiLUServer
    hyperparameters = {"config": FedLiLUConfig}


class FedExP(MessageStrategy):
    """FedExP (Jhunjhunwala, Wang, Joshi, ICLR 2023) on the Message API; hyperparameters as
    :class:`flwr_strategies.FedExP`."""

    core_cls = FedExPServer
    hyperparameters = {"config": FedExPConfig}


class Scaffold(MessageStrategy):
    """SCAFFOLD (Karimireddy et al., ICML 2020, option II) on the Message API; hyperparameters as
    :class:`flwr_strategies.Scaffold`. Clients keep ``c_i`` in ``context.state``
    (:class:`flwr_strategies.clients.fedli.ScaffoldSession`)."""

    core_cls = ScaffoldServer
    hyperparameters = {"config": ScaffoldConfig}
