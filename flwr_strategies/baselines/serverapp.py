"""FedAvg, FedProx and FedAdam as Message-API strategies (``strategy.start(grid, ...)``).

Same arguments as Flower's ``flwr.serverapp.strategy.FedAvg`` (see
:class:`~flwr_strategies.adapters.message.MessageStrategy`), plus each method's hyperparameters.
"""

from __future__ import annotations

from typing import Any

from ..adapters.centralized import CentralizedMessageStrategy
from .config import FedAdamConfig, FedProxConfig
from .server import FedAdamServer, FedAvgServer, FedProxServer

__all__ = ["FedAvg", "FedProx", "FedAdam"]


class FedAvg(CentralizedMessageStrategy):
    """FedAvg (McMahan et al., AISTATS 2017) on the Message API."""

    def build_method_core(self, initial_arrays, **core_kwargs: Any) -> FedAvgServer:
        return FedAvgServer(initial_arrays, **core_kwargs)


class FedProx(CentralizedMessageStrategy):
    """FedProx (Li et al., MLSys 2020) on the Message API; sends ``proximal-mu`` (and
    ``proximal_mu``) to the clients.

    Parameters
    ----------
    proximal_mu : float (default: 0.01)
        Proximal weight, >= 0.
    **kwargs
        Flower's Message-API ``FedAvg`` arguments.
    """

    def __init__(self, *, proximal_mu: float = 0.01, **kwargs: Any) -> None:
        self.config = FedProxConfig(proximal_mu=proximal_mu)
        super().__init__(**kwargs)

    def build_method_core(self, initial_arrays, **core_kwargs: Any) -> FedProxServer:
        return FedProxServer(initial_arrays, config=self.config, **core_kwargs)


class FedAdam(CentralizedMessageStrategy):
    """FedAdam (Reddi et al., ICLR 2021) on the Message API.

    Parameters
    ----------
    eta, beta_1, beta_2, tau : float
        As :class:`~flwr_strategies.baselines.config.FedAdamConfig` (0.01, 0.9, 0.99, 1e-3).
    **kwargs
        Flower's Message-API ``FedAvg`` arguments.
    """

    def __init__(self, *, eta: float = 0.01, beta_1: float = 0.9, beta_2: float = 0.99, tau: float = 1e-3,
                 **kwargs: Any) -> None:
        self.config = FedAdamConfig(eta=eta, beta_1=beta_1, beta_2=beta_2, tau=tau)
        super().__init__(**kwargs)

    def build_method_core(self, initial_arrays, **core_kwargs: Any) -> FedAdamServer:
        return FedAdamServer(initial_arrays, config=self.config, **core_kwargs)
