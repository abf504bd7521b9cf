"""FedMUD and its low-rank baselines on Flower's Message API (run by Flower's ``start()``).

Arguments: Flower's Message-API ``FedAvg`` arguments, the plain ``model`` and any
:class:`~flwr_strategies.fedmud.config.FedMUDConfig` field, as the legacy classes of the same names
(:mod:`.strategy`). The initial arrays and the number of clients come from the run.
"""

from __future__ import annotations

from ..adapters import REQUIRED, MessageStrategy
from .config import METHOD_CONFIGS
from .server import FedMUDServer

__all__ = ["FedMUD", "FedLMT", "FedPara", "FedHM"]


class _LowRank(MessageStrategy):
    core_cls = FedMUDServer
    arguments = {"model": REQUIRED}


class FedMUD(_LowRank):
    """FedMUD (Li et al., ICML 2025) on the Message API; as :class:`flwr_strategies.FedMUD`."""

    hyperparameters = {"config": METHOD_CONFIGS["fedmud"]}


class FedLMT(_LowRank):
    """FedLMT (Liu et al., ICML 2024), as defined in FedMUD's paper, on the Message API."""

    hyperparameters = {"config": METHOD_CONFIGS["fedlmt"]}


class FedPara(_LowRank):
    """FedPara (Hyeon-Woo et al., ICLR 2022), as defined in FedMUD's paper, on the Message API."""

    hyperparameters = {"config": METHOD_CONFIGS["fedpara"]}


class FedHM(_LowRank):
    """FedHM (Yao et al., 2021), as defined in FedMUD's paper, on the Message API."""

    hyperparameters = {"config": METHOD_CONFIGS["fedhm"]}
