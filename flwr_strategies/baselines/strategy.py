"""FedAvg, FedProx, FedAdam and FedSAM as legacy Flower strategies (``flwr.server.strategy``).

Each takes Flower's legacy ``FedAvg`` arguments (:class:`~flwr_strategies.adapters.LegacyStrategy`)
and its hyperparameters as keyword arguments, the fields of its config dataclass in :mod:`.config`.
Compared with Flower's own classes they sample by partition id with a seeded generator, check every
reply before aggregating, and record bytes and failures per round.
"""

from __future__ import annotations

from ..adapters import LegacyStrategy
from .config import FedAdamConfig, FedProxConfig
from .server import FedAdamServer, FedAvgServer, FedProxServer

__all__ = ["FedAvg", "FedProx", "FedAdam", "FedSAM"]


class FedAvg(LegacyStrategy):
    """FedAvg (McMahan et al., "Communication-Efficient Learning of Deep Networks from
    Decentralized Data", AISTATS 2017): the example-weighted average of the clients' models, with
    the arithmetic of Flower's ``aggregate_inplace``. No hyperparameters."""

    core_cls = FedAvgServer


class FedProx(LegacyStrategy):
    """FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020):
    FedAvg's server; the clients add ``mu/2 ||w - w_t||^2`` (sent as ``config["proximal-mu"]``).
    Its hyperparameter is the field of :class:`~flwr_strategies.baselines.config.FedProxConfig`.
    """

    core_cls = FedProxServer
    hyperparameters = {"config": FedProxConfig}


class FedAdam(LegacyStrategy):
    """FedAdam (Reddi et al., "Adaptive Federated Optimization", ICLR 2021): Adam on the server
    over the averaged update, with the arithmetic of Flower's ``FedAdam``. Its hyperparameters are
    the fields of :class:`~flwr_strategies.baselines.config.FedAdamConfig`.
    """

    core_cls = FedAdamServer
    hyperparameters = {"config": FedAdamConfig}


class FedSAM(LegacyStrategy):
    """FedSAM (Qu et al., ICML 2022; Caldarola et al., ECCV 2022): FedAvg's server; the clients take
    sharpness-aware (SAM) local steps with radius ``rho`` (their setting, paper 0.1). No server
    hyperparameters."""

    core_cls = FedAvgServer
