"""FedMUD and its low-rank baselines as legacy Flower strategies (``flwr.server.strategy``).

Li, Luo, Wang, Tang, Xu, Luo, Li, He, Li, "The Panaceas for Improving Low-Rank Decomposition in
Communication-Efficient Federated Learning", ICML 2025.

Each class takes Flower's legacy ``FedAvg`` arguments (:class:`~flwr_strategies.adapters.LegacyStrategy`),
the plain ``model`` whose layers are decomposed, and any
:class:`~flwr_strategies.fedmud.config.FedMUDConfig` field as a keyword (``decomp="mat"``,
``pattern="ab"``, ``target_ratio=1/16``...). Every round sends each sampled client only the averaged
factors and the dense arrays; the clients run :class:`flwr_strategies.clients.fedmud.FedMUDRound`.
The global model is rebuilt from the factors each round, so a wrapper that changes it (Flower's
differential-privacy wrappers) is refused with an error.
"""

from __future__ import annotations

from ..adapters import REQUIRED, LegacyStrategy
from ..adapters.method import LazyCore
from .config import METHOD_CONFIGS

__all__ = ["FedMUD", "FedLMT", "FedPara", "FedHM"]


class _LowRank(LegacyStrategy):
    core_cls = LazyCore("flwr_strategies.fedmud.server:FedMUDServer")  # the server imports torch
    arguments = {"model": REQUIRED}


class FedMUD(_LowRank):
    """FedMUD (Li et al., ICML 2025): clients learn a low-rank *update* of frozen base weights;
    only its factors travel. Default: FedMUD+BKD+AAD at whole-model ratio 1/32, reset every round.
    Its hyperparameters are the fields of :class:`~flwr_strategies.fedmud.config.FedMUDConfig`.

    Parameters
    ----------
    model : torch.nn.Module
        The plain model (structure; copied). Every ``nn.Linear``/``nn.Conv2d`` except the first and
        the last is decomposed. ``initial_parameters`` (or, without it, a client's parameters) are
        its ``state_dict()`` entries in order.
    """

    hyperparameters = {"config": METHOD_CONFIGS["fedmud"]}


class FedLMT(_LowRank):
    """FedLMT (Liu et al., ICML 2024) as defined in FedMUD's paper: pre-decomposed weights ``W = UV``,
    both factors ``Uniform(-a, a)`` once, never reset, factors averaged directly. Arguments as
    :class:`FedMUD` (its FedMUDConfig defaults: ``METHOD_CONFIGS["fedlmt"]``)."""

    hyperparameters = {"config": METHOD_CONFIGS["fedlmt"]}


class FedPara(_LowRank):
    """FedPara (Hyeon-Woo et al., ICLR 2022) as defined in FedMUD's paper: ``W = (X1 Y1) * (X2 Y2)`` on
    the ``m x n`` view, four random trainable factors, never reset. Arguments as :class:`FedMUD`
    (defaults: ``METHOD_CONFIGS["fedpara"]``)."""

    hyperparameters = {"config": METHOD_CONFIGS["fedpara"]}


class FedHM(_LowRank):
    """FedHM (Yao et al., 2021) as defined in FedMUD's paper: the server factorises its full weights by
    truncated SVD every round and averages the clients' recovered products. Arguments as
    :class:`FedMUD` (defaults: ``METHOD_CONFIGS["fedhm"]``)."""

    hyperparameters = {"config": METHOD_CONFIGS["fedhm"]}
