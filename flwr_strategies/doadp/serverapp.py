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
from . import strategy as legacy
from .strategy import Accounted

__all__ = ["DOADP", "DMSGD", "DPDO", "DPDDA", "CPGT"]


class _Private(MessageStrategy):
    def __init__(self, fraction_train: float = 1.0, fraction_evaluate: float = 0.0, *args: Any, **kwargs: Any) -> None:
        super().__init__(fraction_train, fraction_evaluate, *args, **kwargs)


class DOADP(Accounted, _Private, like=legacy.DOADP):
    """DO-ADP (Huo et al., arXiv 2506.07102) on the Message API; arguments as
    :class:`flwr_strategies.DOADP` (``fraction_evaluate`` defaults to 0.0, not Flower's 1.0, and
    other values are refused: the clients would score the public model on their training data).
    ``accountant`` / ``privacy_spent()`` as on Flower's DP wrappers."""


class DMSGD(MessageStrategy, like=legacy.DMSGD):
    """Non-private decentralized momentum SGD on the Message API; as :class:`flwr_strategies.DMSGD`."""


class DPDO(_Private, like=legacy.DPDO):
    """DPDO (Huang et al. 2015) on the Message API; as :class:`flwr_strategies.DPDO` (``fraction_evaluate``
    defaults to 0.0, not Flower's 1.0: federated evaluation is refused)."""


class DPDDA(_Private, like=legacy.DPDDA):
    """DP-DDA (Liu et al. 2024) on the Message API; as :class:`flwr_strategies.DPDDA` (``fraction_evaluate``
    defaults to 0.0, not Flower's 1.0: federated evaluation is refused)."""


class CPGT(_Private, like=legacy.CPGT):
    """CPGT (Xie et al. 2023) on the Message API; as :class:`flwr_strategies.CPGT` (``fraction_evaluate``
    defaults to 0.0, not Flower's 1.0: federated evaluation is refused)."""
