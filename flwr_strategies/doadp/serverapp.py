"""DO-ADP, D-mSGD, DPDO, DP-DDA and CPGT as Message-API strategies (run by Flower's ``start()``).

Arguments: Flower's Message-API ``FedAvg`` arguments (``fraction_train`` stays 1.0: every agent takes
part every round) and those of the legacy class of the same name (:mod:`.strategy`), ``num_rounds``
included: the noise is calibrated for it, so pass the same number to ``start()``. Example::

    strategy = DOADP(num_rounds=2000, local_dataset_size=3000, lr=0.01, batch_size=32, epsilon=1.0)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=2000,
                            evaluate_fn=central_evaluate)
"""

from __future__ import annotations

from typing import Any

from ..adapters import MessageStrategy
from .baseline_server import CPGTServer, DPDDAServer, DPDOServer
from .config import CPGTConfig, DMSGDConfig, DOADPConfig, DPDDAConfig, DPDOConfig
from .server import DMSGDServer, DOADPServer
from .strategy import AGENTS, DOADP_ARGUMENTS, GRAPH, NO_FEDERATED_EVALUATION, RENAMED, Accounted

__all__ = ["DOADP", "DMSGD", "DPDO", "DPDDA", "CPGT"]


class _Agents(MessageStrategy):
    arguments = AGENTS
    renamed = RENAMED


class _Private(_Agents):
    federated_evaluation = NO_FEDERATED_EVALUATION

    def __init__(self, fraction_train: float = 1.0, fraction_evaluate: float = 0.0, *args: Any, **kwargs: Any) -> None:
        super().__init__(fraction_train, fraction_evaluate, *args, **kwargs)


class DOADP(Accounted, _Private):
    """DO-ADP (Huo et al., arXiv 2506.07102) on the Message API; arguments as
    :class:`flwr_strategies.DOADP` (``fraction_evaluate`` defaults to 0.0, not Flower's 1.0, and
    other values are refused: the clients would score the public model on their training data).
    ``accountant`` / ``privacy_spent()`` as on Flower's DP wrappers."""

    core_cls = DOADPServer
    hyperparameters = {"config": DOADPConfig, "graph": GRAPH}
    arguments = DOADP_ARGUMENTS


class DMSGD(_Agents):
    """Non-private decentralized momentum SGD on the Message API; as :class:`flwr_strategies.DMSGD`."""

    core_cls = DMSGDServer
    hyperparameters = {"config": DMSGDConfig, "graph": GRAPH}


class DPDO(_Private):
    """DPDO (Huang et al. 2015) on the Message API; as :class:`flwr_strategies.DPDO` (``fraction_evaluate``
    defaults to 0.0, not Flower's 1.0: federated evaluation is refused)."""

    core_cls = DPDOServer
    hyperparameters = {"config": DPDOConfig, "graph": GRAPH}


class DPDDA(_Private):
    """DP-DDA (Liu et al. 2024) on the Message API; as :class:`flwr_strategies.DPDDA` (``fraction_evaluate``
    defaults to 0.0, not Flower's 1.0: federated evaluation is refused)."""

    core_cls = DPDDAServer
    hyperparameters = {"config": DPDDAConfig, "graph": GRAPH}


class CPGT(_Private):
    """CPGT (Xie et al. 2023) on the Message API; as :class:`flwr_strategies.CPGT` (``fraction_evaluate``
    defaults to 0.0, not Flower's 1.0: federated evaluation is refused)."""

    core_cls = CPGTServer
    hyperparameters = {"config": CPGTConfig, "graph": GRAPH}
