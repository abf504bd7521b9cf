"""DFedCata, DFedAvg, D-PSGD and FedSAM as Message-API strategies (``strategy.start(grid, ...)``).

Usable exactly like Flower's ``flwr.serverapp.strategy.FedAvg``; the number of peers is learned at
``start()``::

    strategy = DFedCata(beta=0.99, lam=0.05, topology="random")
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=500)

The decentralized classes take the graph settings of
:class:`~flwr_strategies.decentralized.serverapp.DecentralizedMessageStrategy`; FedSAM takes
Flower's Message-API ``FedAvg`` arguments.

Paper: Q. Li, M. Zhang, Y. Liu, Q. Yin, L. Shen, X. Cao, "Boosting the Performance of Decentralized
Federated Learning via Catalyst Acceleration", arXiv:2410.07272.
"""

from __future__ import annotations

from typing import Any

from ..baselines.serverapp import FedAvg
from ..decentralized.serverapp import DecentralizedMessageStrategy
from .config import DFedCataConfig
from .server import DFedAvgServer, DFedCataServer, DPSGDServer

__all__ = ["DFedCata", "DFedAvg", "DPSGD", "FedSAM"]


class DFedCata(DecentralizedMessageStrategy):
    """DFedCata (arXiv:2410.07272) on the Message API.

    Parameters
    ----------
    beta : float (default: 0.99)
        Extrapolation coefficient, in [0, 1) (paper 0.99).
    lam : float (default: 0.05)
        Moreau-envelope penalty, >= 0 with ``lr * lam < 1`` (paper 0.05); sent as ``config["lam"]``.
    lr : float | None (default: None)
        Round-1 learning rate, to check ``lr * lam < 1`` now (each round's lr is checked too).
    extrapolation_anchor : str (default: "prev_mixed")
        ``"prev_mixed"`` (paper) or ``"prev_local"`` (official code).
    sequential_inplace : bool (default: False)
        The official code's one-peer-at-a-time order: ``num_rounds`` counts turns
        (``num_partitions * T`` for T algorithm rounds).
    **kwargs
        :class:`~flwr_strategies.decentralized.serverapp.DecentralizedMessageStrategy` arguments.
    """

    def __init__(self, *, beta: float = 0.99, lam: float = 0.05, lr: float | None = None,
                 extrapolation_anchor: str = "prev_mixed", sequential_inplace: bool = False, **kwargs: Any) -> None:
        self.config = DFedCataConfig(beta=beta, lam=lam, lr=lr, extrapolation_anchor=extrapolation_anchor,
                                     sequential_inplace=sequential_inplace)
        super().__init__(**kwargs)

    def build_method_core(self, initial_arrays, **core_kwargs: Any) -> DFedCataServer:
        return DFedCataServer(initial_arrays, config=self.config, **core_kwargs)


class DFedAvg(DecentralizedMessageStrategy):
    """DFedAvg (also the server of DFedAvgM and DFedSAM) on the Message API."""

    def build_method_core(self, initial_arrays, **core_kwargs: Any) -> DFedAvgServer:
        return DFedAvgServer(initial_arrays, **core_kwargs)


class DPSGD(DecentralizedMessageStrategy):
    """D-PSGD (Lian et al., NeurIPS 2017) on the Message API."""

    def build_method_core(self, initial_arrays, **core_kwargs: Any) -> DPSGDServer:
        return DPSGDServer(initial_arrays, **core_kwargs)


class FedSAM(FedAvg):
    """FedSAM: FedAvg's server, SAM local steps on the clients (Message API)."""
