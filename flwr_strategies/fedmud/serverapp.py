"""FedMUD and its low-rank baselines on Flower's Message API (run by Flower's ``start()``).

Arguments: Flower's Message-API ``FedAvg`` arguments, the plain ``model`` and any
:class:`~flwr_strategies.fedmud.config.FedMUDConfig` field, as the legacy classes of the same names
(:mod:`.strategy`). The initial arrays and the number of clients come from the run.
"""

from __future__ import annotations

from ..adapters import MessageStrategy
from . import strategy as legacy

__all__ = ["FedMUD", "FedLMT", "FedPara", "FedHM"]


class FedMUD(MessageStrategy, like=legacy.FedMUD):
    """FedMUD (Li et al., ICML 2025) on the Message API; as :class:`flwr_strategies.FedMUD`."""


class FedLMT(MessageStrategy, like=legacy.FedLMT):
    """FedLMT (Liu et al., ICML 2024), as defined in FedMUD's paper, on the Message API."""


class FedPara(MessageStrategy, like=legacy.FedPara):
    """FedPara (Hyeon-Woo et al., ICLR 2022), as defined in FedMUD's paper, on the Message API."""


class FedHM(MessageStrategy, like=legacy.FedHM):
    """FedHM (Yao et al., 2021), as defined in FedMUD's paper, on the Message API."""
