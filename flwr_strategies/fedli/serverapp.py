"""FedLi-LS, FedLi-LU, FedExP and SCAFFOLD as Message-API strategies (``strategy.start(grid, ...)``).

Same arguments as Flower's ``flwr.serverapp.strategy.FedAvg`` (``fraction_train``,
``min_train_nodes``, ...; see :class:`~flwr_strategies.adapters.message.MessageStrategy`) plus each
method's hyperparameters, exactly as the legacy classes in :mod:`flwr_strategies.fedli.strategy`.
The model and the number of clients are learnt at ``start()``::

    strategy = FedLiLS(fraction_train=0.1)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(net.state_dict()), num_rounds=100)
"""

from __future__ import annotations

from typing import Any

from ..adapters.centralized import CentralizedMessageStrategy
from .armijo import ArmijoConfig
from .config import FedExPConfig, FedLiLSConfig, FedLiLUConfig, ScaffoldConfig
from .dfw import DFWConfig
from .server import FedExPServer, FedLiLSServer, FedLiLUServer, ScaffoldServer
from .strategy import bad_reply_alias, fedexp_config, ls_config, lu_config, scaffold_config

__all__ = ["FedLiLS", "FedLiLU", "FedExP", "Scaffold"]


class FedLiLS(CentralizedMessageStrategy):
    """FedLi-LS (Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated Learning") on
    the Message API. Method arguments as :class:`flwr_strategies.fedli.strategy.FedLiLS`
    (``step_size_sync``, ``armijo``, ``weighting`` or ``config``); the rest are Flower's
    Message-API ``FedAvg`` arguments."""

    def __init__(self, *, step_size_sync: str | float | None = None, armijo: ArmijoConfig | None = None,
                 weighting: str | None = None, config: FedLiLSConfig | None = None, on_nonfinite: str | None = None,
                 **kwargs: Any) -> None:
        self.config = ls_config(config, step_size_sync, armijo, weighting)
        super().__init__(**bad_reply_alias(on_nonfinite, kwargs))

    def build_method_core(self, initial_arrays, **core_kwargs: Any) -> FedLiLSServer:
        return FedLiLSServer(initial_arrays, config=self.config, **core_kwargs)


class FedLiLU(CentralizedMessageStrategy):
    """FedLi-LU (same paper, Algorithm 2) on the Message API. Method arguments as
    :class:`flwr_strategies.fedli.strategy.FedLiLU` (``dfw``, ``loss_report``, ``weighting`` or
    ``config``). Measured: its DFW step size is clipped at 1 in practice (FedAvg's step plus server
    weight decay); see :class:`~flwr_strategies.fedli.server.FedLiLUServer`."""

    def __init__(self, *, dfw: DFWConfig | None = None, loss_report: str | None = None, weighting: str | None = None,
                 config: FedLiLUConfig | None = None, on_nonfinite: str | None = None, **kwargs: Any) -> None:
        self.config = lu_config(config, dfw, loss_report, weighting)
        super().__init__(**bad_reply_alias(on_nonfinite, kwargs))

    def build_method_core(self, initial_arrays, **core_kwargs: Any) -> FedLiLUServer:
        return FedLiLUServer(initial_arrays, config=self.config, **core_kwargs)


class FedExP(CentralizedMessageStrategy):
    """FedExP (Jhunjhunwala, Wang, Joshi, ICLR 2023) on the Message API. Method arguments as
    :class:`flwr_strategies.fedli.strategy.FedExP` (``eps``, ``eps_scaling``, ``eps_decay``,
    ``weighting``, ``eval_last2_avg`` or ``config``)."""

    def __init__(self, *, eps: float | None = None, eps_scaling: str | None = None, eps_decay: float | None = None,
                 weighting: str | None = None, eval_last2_avg: bool | None = None, config: FedExPConfig | None = None,
                 on_nonfinite: str | None = None, **kwargs: Any) -> None:
        self.config = fedexp_config(config, eps, eps_scaling, eps_decay, weighting, eval_last2_avg)
        super().__init__(**bad_reply_alias(on_nonfinite, kwargs))

    def build_method_core(self, initial_arrays, **core_kwargs: Any) -> FedExPServer:
        return FedExPServer(initial_arrays, config=self.config, **core_kwargs)


class Scaffold(CentralizedMessageStrategy):
    """SCAFFOLD (Karimireddy et al., ICML 2020, option II) on the Message API. Method arguments as
    :class:`flwr_strategies.fedli.strategy.Scaffold` except ``num_partitions``, which comes from the
    nodes at ``start()``. Clients keep ``c_i`` in ``context.state``
    (:class:`flwr_strategies.clients.fedli.ScaffoldSession`)."""

    def __init__(self, *, server_lr: float | None = None, control_state: str | None = None, weighting: str | None = None,
                 total_examples: int | None = None, correction_in_clip: bool | None = None,
                 config: ScaffoldConfig | None = None, on_nonfinite: str | None = None, **kwargs: Any) -> None:
        self.config = scaffold_config(config, server_lr, control_state, weighting, total_examples, correction_in_clip)
        super().__init__(**bad_reply_alias(on_nonfinite, kwargs))

    def build_method_core(self, initial_arrays, **core_kwargs: Any) -> ScaffoldServer:
        return ScaffoldServer(initial_arrays, config=self.config, **core_kwargs)
