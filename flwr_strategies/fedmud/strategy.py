"""FedMUD and its low-rank baselines as legacy Flower strategies (``flwr.server.strategy.Strategy``).

Li, Luo, Wang, Tang, Xu, Luo, Li, He, Li, "The Panaceas for Improving Low-Rank Decomposition in
Communication-Efficient Federated Learning", ICML 2025.

Each class takes Flower's legacy ``FedAvg`` arguments (``initial_parameters``, ``fraction_fit``,
``min_fit_clients``, ``evaluate_fn``, ``on_fit_config_fn``...; see
:class:`~flwr_strategies.adapters.centralized.CentralizedLegacyStrategy`), the plain ``model`` whose
layers are decomposed, and any :class:`~flwr_strategies.fedmud.config.FedMUDConfig` setting as a
keyword (``decomp="mat"``, ``pattern="ab"``, ``target_ratio=1/16``...). Every round sends each sampled
client only the averaged factors and the dense arrays; the clients run
:class:`flwr_strategies.clients.fedmud.FedMUDRound` (or the ready-made ``FedMUDClient``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from ..adapters.centralized import CentralizedLegacyStrategy
from .config import METHOD_CONFIGS, FedMUDConfig
from .server import FedMUDServer

__all__ = ["FedMUD", "FedLMT", "FedPara", "FedHM", "FedMUDStrategy", "split_config"]


def split_config(base: FedMUDConfig, config: FedMUDConfig | None, kwargs: dict[str, Any]) -> tuple[FedMUDConfig, dict]:
    """``(config, rest)``: the FedMUD settings among ``kwargs`` applied over ``config`` (or ``base``),
    and the remaining (Flower) arguments."""
    names = set(FedMUDConfig.__dataclass_fields__)
    mine = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
    if config is not None and not isinstance(config, FedMUDConfig):
        raise TypeError(f"config must be a FedMUDConfig, got {type(config).__name__}")
    return (config or base).with_overrides(mine), kwargs


class FedMUD(CentralizedLegacyStrategy):
    """FedMUD (Li et al., ICML 2025): clients learn a low-rank *update* of frozen base weights;
    only its factors travel. Default: FedMUD+BKD+AAD at whole-model ratio 1/32, reset every round.

    Parameters
    ----------
    model : torch.nn.Module
        The plain model (structure; copied). Every ``nn.Linear``/``nn.Conv2d`` except the first and
        the last is decomposed.
    initial_parameters : Parameters | list[np.ndarray], optional
        Every ``model.state_dict()`` entry, in order. Default: ``model``'s own current weights.
    config : FedMUDConfig, optional
        All FedMUD settings at once; keyword settings below override it.
    **kwargs
        Any :class:`~flwr_strategies.fedmud.config.FedMUDConfig` field (``decomp``, ``pattern``,
        ``target_ratio``, ``fallback_ratio``, ``init_scale``, ``reset_interval``...), and Flower's
        legacy ``FedAvg`` arguments (``fraction_fit`` default 1.0, ``min_fit_clients``,
        ``min_available_clients``, ``evaluate_fn``, ``on_fit_config_fn``, ``seed``,
        ``num_partitions``, ``on_bad_reply``...).
    """

    method_config = METHOD_CONFIGS["fedmud"]

    def __init__(self, *, model: nn.Module, config: FedMUDConfig | None = None, **kwargs: Any) -> None:
        self.model = model
        self.config, rest = split_config(self.method_config, config, dict(kwargs))
        if rest.get("initial_parameters") is None and isinstance(model, nn.Module):
            rest["initial_parameters"] = [v.detach().cpu().numpy().copy() for v in model.state_dict().values()]
        super().__init__(**rest)

    def build_core(self, initial_arrays: list[np.ndarray], **core_kwargs: Any) -> FedMUDServer:
        return FedMUDServer(initial_arrays, model=self.model, config=self.config, **core_kwargs)

    def global_arrays(self) -> list[np.ndarray]:
        """Plain weights of the current global model (``model.state_dict()`` order)."""
        return self.core.global_arrays()


class FedLMT(FedMUD):
    """FedLMT (Liu et al., ICML 2024) as defined in FedMUD's paper: pre-decomposed weights ``W = UV``,
    both factors ``Uniform(-a, a)`` once, never reset, factors averaged directly. Same arguments as
    :class:`FedMUD`."""

    method_config = METHOD_CONFIGS["fedlmt"]


class FedPara(FedMUD):
    """FedPara (Hyeon-Woo et al., ICLR 2022) as defined in FedMUD's paper: ``W = (X1 Y1) * (X2 Y2)`` on
    the ``m x n`` view, four random trainable factors, never reset. Same arguments as :class:`FedMUD`."""

    method_config = METHOD_CONFIGS["fedpara"]


class FedHM(FedMUD):
    """FedHM (Yao et al., 2021) as defined in FedMUD's paper: the server factorises its full weights by
    truncated SVD every round and averages the clients' recovered products. Same arguments as
    :class:`FedMUD`."""

    method_config = METHOD_CONFIGS["fedhm"]


#: Former name of :class:`FedMUD` (the top-level export).
FedMUDStrategy = FedMUD
