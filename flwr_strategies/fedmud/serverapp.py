"""FedMUD and its low-rank baselines on Flower's Message API (``strategy.start(grid, ...)``).

Same arguments as Flower's ``flwr.serverapp.strategy.FedAvg`` (``fraction_train``,
``min_train_nodes``, ...; see :class:`~flwr_strategies.adapters.message.MessageStrategy`), plus the
plain ``model`` and any :class:`~flwr_strategies.fedmud.config.FedMUDConfig` setting as a keyword.
The initial arrays and the number of clients come from ``start()``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from ..adapters.centralized import CentralizedMessageStrategy
from .config import METHOD_CONFIGS, FedMUDConfig
from .server import FedMUDServer
from .strategy import split_config

__all__ = ["FedMUD", "FedLMT", "FedPara", "FedHM"]


class FedMUD(CentralizedMessageStrategy):
    """FedMUD (Li et al., ICML 2025) on the Message API; default FedMUD+BKD+AAD at ratio 1/32.

    Parameters
    ----------
    model : torch.nn.Module
        The plain model (structure; copied): its linear/conv layers except the first and the last
        are decomposed.
    config : FedMUDConfig, optional
        All FedMUD settings at once; keyword settings override it.
    **kwargs
        Any :class:`~flwr_strategies.fedmud.config.FedMUDConfig` field, and Flower's Message-API
        ``FedAvg`` arguments (``fraction_train``, ``min_train_nodes``, ``min_available_nodes``,
        ``fraction_evaluate``, ``seed``, ``on_bad_reply``...).
    """

    method_config = METHOD_CONFIGS["fedmud"]

    def __init__(self, *, model: nn.Module, config: FedMUDConfig | None = None, **kwargs: Any) -> None:
        self.model = model
        self.config, rest = split_config(self.method_config, config, dict(kwargs))
        super().__init__(**rest)

    def build_method_core(self, initial_arrays: list[np.ndarray], **core_kwargs: Any) -> FedMUDServer:
        return FedMUDServer(initial_arrays, model=self.model, config=self.config, **core_kwargs)


class FedLMT(FedMUD):
    """FedLMT (Liu et al., ICML 2024), as defined in FedMUD's paper, on the Message API."""

    method_config = METHOD_CONFIGS["fedlmt"]


class FedPara(FedMUD):
    """FedPara (Hyeon-Woo et al., ICLR 2022), as defined in FedMUD's paper, on the Message API."""

    method_config = METHOD_CONFIGS["fedpara"]


class FedHM(FedMUD):
    """FedHM (Yao et al., 2021), as defined in FedMUD's paper, on the Message API."""

    method_config = METHOD_CONFIGS["fedhm"]
