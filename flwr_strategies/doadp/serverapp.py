"""DO-ADP, D-mSGD, DPDO, DP-DDA and CPGT as Message-API strategies (``strategy.start(grid, ...)``).

Same hyperparameters as the legacy classes in :mod:`.strategy`, minus what ``start()`` provides:
the initial model (``initial_arrays``), the number of agents (the connected nodes' partitions) and,
unless given here, ``num_rounds``. Every node takes part in every round, so the defaults wait for
all partitions and switch federated evaluation off. Example::

    strategy = DOADP(local_dataset_size=3000, alpha=0.01, batch_size=32, epsilon=1.0)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=2000,
                            evaluate_fn=central_evaluate)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..adapters.message import MessageStrategy
from ..core.server import ServerCore
from .baseline_server import CPGTServer, DPDDAServer, DPDOServer
from .config import CPGTConfig, DMSGDConfig, DOADPConfig, DPDDAConfig, DPDOConfig
from .server import DMSGDServer, DOADPServer
from .strategy import _CORE_KEYS, split_config

__all__ = ["DOADP", "DMSGD", "DPDO", "DPDDA", "CPGT"]


class _PeerMessage(MessageStrategy):
    server_cls: type = DOADPServer
    config_cls: type = DOADPConfig

    def __init__(self, *, local_dataset_size: int, num_rounds: int | None = None, alpha: float = 0.01,
                 batch_size: int = 32, fraction_evaluate: float = 0.0, min_evaluate_nodes: int = 0,
                 **kwargs: Any) -> None:
        config, rest = split_config(self.config_cls, kwargs)
        self._peer_kwargs = {k: rest.pop(k) for k in _CORE_KEYS if k in rest}
        self._peer_kwargs.update(self.server_cls.graph_arguments(rest))
        if "seed" in self._peer_kwargs:
            rest["seed"] = self._peer_kwargs["seed"]
        self.method_config = config
        self.local_dataset_size = local_dataset_size
        self.alpha = alpha
        self.batch_size = batch_size
        self.num_rounds = num_rounds
        super().__init__(fraction_evaluate=fraction_evaluate, min_evaluate_nodes=min_evaluate_nodes, **rest)

    def build_core(self, initial_arrays: list[np.ndarray], num_partitions: int) -> ServerCore:
        if self.num_rounds is None:
            raise ValueError("num_rounds is needed to calibrate the noise: pass it here or to start()")
        return self.server_cls(initial_arrays, num_partitions=num_partitions, num_rounds=self.num_rounds,
                               dataset_size=self.local_dataset_size, alpha=self.alpha, batch_size=self.batch_size,
                               config=self.method_config, on_train_config=self.on_train_config_fn,
                               **self._peer_kwargs)

    def start(self, grid, initial_arrays, num_rounds: int = 3, *args: Any, **kwargs: Any):
        """Flower's ``Strategy.start``; ``num_rounds`` also sets the planned rounds unless the
        constructor got ``num_rounds``."""
        if self.num_rounds is None:
            self.num_rounds = int(num_rounds)
        return super().start(grid, initial_arrays, num_rounds, *args, **kwargs)


class DOADP(_PeerMessage):
    """DO-ADP (Huo et al., arXiv 2506.07102) on the Message API; arguments as
    :class:`flwr_strategies.doadp.strategy.DOADP` without ``initial_parameters``/``num_clients``,
    plus Flower's Message-API arguments (``min_available_nodes``, ``on_bad_reply``, ``seed``...)."""

    server_cls = DOADPServer
    config_cls = DOADPConfig


class DMSGD(_PeerMessage):
    """Non-private decentralized momentum SGD on the Message API (see the legacy class)."""

    server_cls = DMSGDServer
    config_cls = DMSGDConfig


class DPDO(_PeerMessage):
    """DPDO (Huang et al. 2015) on the Message API (see the legacy class)."""

    server_cls = DPDOServer
    config_cls = DPDOConfig


class DPDDA(_PeerMessage):
    """DP-DDA (Liu et al. 2024) on the Message API (see the legacy class)."""

    server_cls = DPDDAServer
    config_cls = DPDDAConfig


class CPGT(_PeerMessage):
    """CPGT (Xie et al. 2023) on the Message API (see the legacy class)."""

    server_cls = CPGTServer
    config_cls = CPGTConfig
