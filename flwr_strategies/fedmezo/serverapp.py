"""FedMeZO and LoRA FedAvg as Message-API strategies (``strategy.start(grid, initial_arrays, ...)``).

Paper: Ling, Chen, Yao, Li, Shen, "On the Convergence of Zeroth-Order Federated Tuning for Large
Language Models", KDD 2024 (arXiv:2402.05926).

Same arguments as Flower's ``flwr.serverapp.strategy.FedAvg`` (``fraction_train``,
``min_train_nodes``...; see :class:`~flwr_strategies.adapters.message.MessageStrategy`) plus the
method's hyperparameters. ``initial_arrays`` at ``start()`` is the whole model as an
``ArrayRecord(peft_model.state_dict())``; the LoRA arrays are found by name (or pass
``trainable=``). Train messages carry only the adapters (keys ``"0"``, ``"1"``..., in
``named_parameters`` order); ``evaluate_fn`` and federated evaluation get the whole model under
its ``state_dict`` names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..adapters.centralized import CentralizedMessageStrategy
from .config import FedMeZOConfig, LoRAFedAvgConfig
from .server import FedMeZOServer, LoRAFedAvgServer
from .strategy import model_and_trainable, split_method_kwargs

__all__ = ["FedMeZO", "LoRAFedAvg"]


class _LoRAMessage(CentralizedMessageStrategy):
    config_cls: type = FedMeZOConfig
    server_cls: type = FedMeZOServer

    def __init__(self, *, trainable: Sequence[int] | Sequence[str] | None = None, **kwargs: Any) -> None:
        self.config, kwargs = split_method_kwargs(self.config_cls, kwargs)
        self.trainable_arg = None if trainable is None else list(trainable)
        self._final_round: int | None = None
        super().__init__(**kwargs)

    def build_method_core(self, initial_arrays, **core_kwargs: Any):
        _, trainable = model_and_trainable(initial_arrays, self.trainable_arg, names=self._keys)
        return self.server_cls(initial_arrays, trainable=trainable, config=self.config,
                               final_round=self._final_round, **core_kwargs)

    def start(self, grid, initial_arrays, num_rounds: int = 3, *args: Any, **kwargs: Any):
        """Flower's ``start``; also tells the core that ``num_rounds`` is the last (evaluated) round."""
        self._final_round = int(num_rounds)
        if self.core is not None:
            self.core.final_round = int(num_rounds)
        return super().start(grid, initial_arrays, num_rounds, *args, **kwargs)


class FedMeZO(_LoRAMessage):
    """FedMeZO (Ling et al., KDD 2024) on the Message API: FedAvg of LoRA adapters tuned by MeZO
    zeroth-order steps, optional personalised learning rates and seed-and-scalar upload.

    Parameters
    ----------
    trainable : list[int] | list[str] | None (default: None)
        Positions or names of the tuned arrays in ``initial_arrays``; None = names with ``"lora_"``.
    lr, local_steps, local_epochs, batch_size, mu, weight_decay, lr_decay, num_perturbations,
    lr_strategy, lr_alpha, lr_alpha_rel, lr_window, weighting, comm_mode, z_device, restore_mode,
    eval_every :
        Hyperparameters, see :class:`~flwr_strategies.fedmezo.config.FedMeZOConfig` (paper defaults).
    **kwargs
        Flower's Message-API ``FedAvg`` arguments (``fraction_train``, ``fraction_evaluate``,
        ``min_train_nodes``, ``min_available_nodes``...), ``seed``, ``on_bad_reply``.
    """

    config_cls = FedMeZOConfig
    server_cls = FedMeZOServer


class LoRAFedAvg(_LoRAMessage):
    """LoRA FedAvg (FedMeZO's backprop baseline) on the Message API.

    Parameters
    ----------
    trainable :
        As :class:`FedMeZO`.
    lr, local_steps, local_epochs, batch_size, weight_decay, momentum, lr_decay, grad_clip,
    weighting, eval_every :
        Hyperparameters, see :class:`~flwr_strategies.fedmezo.config.LoRAFedAvgConfig`.
    **kwargs
        Flower's Message-API ``FedAvg`` arguments.
    """

    config_cls = LoRAFedAvgConfig
    server_cls = LoRAFedAvgServer
