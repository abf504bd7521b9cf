"""DFedCata, DFedAvg, D-PSGD and FedSAM as legacy Flower strategies over this project's cores.

Paper: Q. Li, M. Zhang, Y. Liu, Q. Yin, L. Shen, X. Cao, "Boosting the Performance of Decentralized
Federated Learning via Catalyst Acceleration", arXiv:2410.07272.

The decentralized classes take the graph settings of
:class:`~flwr_strategies.decentralized.strategy.DecentralizedLegacyStrategy` (``num_clients``,
``initial_parameters``, ``topology``, ``neighbours``, ``weights``, ``evaluate_fn``,
``on_fit_config_fn``, ``seed``...), plus each method's hyperparameters. DFedAvgM and DFedSAM use
:class:`DFedAvg` on the server (their difference is the peers' local rule).
"""

from __future__ import annotations

from typing import Any

from ..baselines.strategy import FedAvg
from ..decentralized.strategy import DecentralizedLegacyStrategy
from .config import DFedCataConfig
from .server import DFedAvgServer, DFedCataServer, DPSGDServer

__all__ = ["DFedCata", "DFedAvg", "DPSGD", "FedSAM"]


class DFedCata(DecentralizedLegacyStrategy):
    """DFedCata: decentralized FL with Catalyst acceleration (arXiv:2410.07272, Algorithm 1).

    Every peer starts its round from the Nesterov-extrapolated point of its model and minimises the
    Moreau envelope ``f_i(x) + lam/2 ||x - x_0||^2`` around it; the peers then gossip.

    Parameters
    ----------
    beta : float (default: 0.99)
        Extrapolation coefficient, in [0, 1) (paper 0.99; 0 disables it).
    lam : float (default: 0.05)
        Moreau-envelope penalty, >= 0 with ``lr * lam < 1`` (paper 0.05); sent as ``config["lam"]``.
    lr : float | None (default: None)
        Round-1 learning rate, to check ``lr * lam < 1`` now (each round's lr is checked too).
    extrapolation_anchor : str (default: "prev_mixed")
        ``"prev_mixed"`` (paper) or ``"prev_local"`` (official code).
    sequential_inplace : bool (default: False)
        The official code's one-peer-at-a-time order: one Flower round per peer, so run
        ``num_clients * T`` Flower rounds for T algorithm rounds (see
        :class:`~flwr_strategies.dfedcata.server.DFedCataServer`).
    **kwargs
        :class:`~flwr_strategies.decentralized.strategy.DecentralizedLegacyStrategy` arguments.
    """

    def __init__(self, *, beta: float = 0.99, lam: float = 0.05, lr: float | None = None,
                 extrapolation_anchor: str = "prev_mixed", sequential_inplace: bool = False, **kwargs: Any) -> None:
        self.config = DFedCataConfig(beta=beta, lam=lam, lr=lr, extrapolation_anchor=extrapolation_anchor,
                                     sequential_inplace=sequential_inplace)
        super().__init__(**kwargs)

    def build_core(self, initial_arrays, **core_kwargs: Any) -> DFedCataServer:
        return DFedCataServer(initial_arrays, config=self.config, **core_kwargs)


class DFedAvg(DecentralizedLegacyStrategy):
    """DFedAvg (Sun, Li, Wang, IEEE TPAMI 2022): local steps from the mixed model, then gossip.
    Also the server of DFedAvgM (heavy-ball local SGD) and DFedSAM (SAM local steps). Takes the
    :class:`~flwr_strategies.decentralized.strategy.DecentralizedLegacyStrategy` arguments."""

    def build_core(self, initial_arrays, **core_kwargs: Any) -> DFedAvgServer:
        return DFedAvgServer(initial_arrays, **core_kwargs)


class DPSGD(DecentralizedLegacyStrategy):
    """D-PSGD (Lian et al., NeurIPS 2017): ``x_i <- sum_j w_ij x_j - lr g_i(x_i)`` with one local
    SGD step per round. Takes the
    :class:`~flwr_strategies.decentralized.strategy.DecentralizedLegacyStrategy` arguments."""

    def build_core(self, initial_arrays, **core_kwargs: Any) -> DPSGDServer:
        return DPSGDServer(initial_arrays, **core_kwargs)


class FedSAM(FedAvg):
    """FedSAM (Qu et al., ICML 2022; Caldarola et al., ECCV 2022): FedAvg's server with SAM local
    steps on the clients (radius ``rho``, paper 0.1, set on the client). Flower's legacy ``FedAvg``
    arguments."""
