"""FedAvg, FedProx and FedAdam as legacy Flower strategies over this project's cores.

Same arguments as Flower's legacy ``FedAvg`` (see
:class:`~flwr_strategies.adapters.centralized.CentralizedLegacyStrategy`), plus each method's
hyperparameters. Compared with Flower's own classes they sample by partition id with a seeded
generator, check every reply before aggregating, and record bytes and failures per round.
"""

from __future__ import annotations

from typing import Any

from ..adapters.centralized import CentralizedLegacyStrategy
from .config import FedAdamConfig, FedProxConfig
from .server import FedAdamServer, FedAvgServer, FedProxServer

__all__ = ["FedAvg", "FedProx", "FedAdam"]


class FedAvg(CentralizedLegacyStrategy):
    """FedAvg (McMahan et al., "Communication-Efficient Learning of Deep Networks from
    Decentralized Data", AISTATS 2017). Takes Flower's legacy ``FedAvg`` arguments."""

    def build_core(self, initial_arrays, **core_kwargs: Any) -> FedAvgServer:
        return FedAvgServer(initial_arrays, **core_kwargs)


class FedProx(CentralizedLegacyStrategy):
    """FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020).

    Parameters
    ----------
    proximal_mu : float (default: 0.01)
        Proximal weight sent to the clients (``config["proximal_mu"]``), >= 0.
    **kwargs
        Flower's legacy ``FedAvg`` arguments.
    """

    def __init__(self, *, proximal_mu: float = 0.01, **kwargs: Any) -> None:
        self.config = FedProxConfig(proximal_mu=proximal_mu)
        super().__init__(**kwargs)

    def build_core(self, initial_arrays, **core_kwargs: Any) -> FedProxServer:
        return FedProxServer(initial_arrays, config=self.config, **core_kwargs)


class FedAdam(CentralizedLegacyStrategy):
    """FedAdam (Reddi et al., "Adaptive Federated Optimization", ICLR 2021).

    Parameters
    ----------
    eta : float (default: 0.01)
        Server learning rate, > 0.
    beta_1 : float (default: 0.9)
        First-moment decay, in [0, 1).
    beta_2 : float (default: 0.99)
        Second-moment decay, in [0, 1).
    tau : float (default: 1e-3)
        Adaptivity, > 0.
    **kwargs
        Flower's legacy ``FedAvg`` arguments.
    """

    def __init__(self, *, eta: float = 0.01, beta_1: float = 0.9, beta_2: float = 0.99, tau: float = 1e-3,
                 **kwargs: Any) -> None:
        self.config = FedAdamConfig(eta=eta, beta_1=beta_1, beta_2=beta_2, tau=tau)
        super().__init__(**kwargs)

    def build_core(self, initial_arrays, **core_kwargs: Any) -> FedAdamServer:
        return FedAdamServer(initial_arrays, config=self.config, **core_kwargs)
