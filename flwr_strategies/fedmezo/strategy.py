"""FedMeZO and LoRA FedAvg as legacy Flower strategies (``flwr.server.strategy.Strategy``).

Paper: Ling, Chen, Yao, Li, Shen, "On the Convergence of Zeroth-Order Federated Tuning for Large
Language Models", KDD 2024 (arXiv:2402.05926).

Both take Flower's legacy ``FedAvg`` arguments (``fraction_fit``, ``min_fit_clients``,
``evaluate_fn``, ``on_fit_config_fn``...; see
:class:`~flwr_strategies.adapters.centralized.CentralizedLegacyStrategy`) plus the method's
hyperparameters (:class:`~.config.FedMeZOConfig`, :class:`~.config.LoRAFedAvgConfig`; the paper's
values by default). ``initial_parameters`` is the whole model; give it as a name -> array mapping
(``{k: v.cpu().numpy() for k, v in peft_model.state_dict().items()}``) and the LoRA arrays are
found by name, or as a list with ``trainable=[positions]``. Clients receive and return only the
trainable arrays; ``evaluate_fn`` receives the whole model in the initial layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

import numpy as np

from ..adapters.centralized import CentralizedLegacyStrategy, initial_ndarrays
from .config import FedMeZOConfig, LoRAFedAvgConfig
from .server import FedMeZOServer, LoRAFedAvgServer, lora_positions

__all__ = ["FedMeZO", "LoRAFedAvg", "split_method_kwargs", "model_and_trainable"]


def split_method_kwargs(config_cls, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``(config_cls(**method_kwargs), other_kwargs)``: hyperparameters go to the config."""
    names = {f.name for f in fields(config_cls)}
    mine = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
    return config_cls(**mine), kwargs


def _as_array(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor (state_dict value)
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def model_and_trainable(initial: Any, trainable: Sequence[int] | Sequence[str] | None,
                        names: Sequence[str] | None = None) -> tuple[list[np.ndarray], list[int]]:
    """The model as a list of arrays and the positions of its trainable arrays.

    ``initial`` is a name -> array mapping (a ``state_dict``), Flower ``Parameters`` or a list of
    arrays (then ``names`` may give their names). ``trainable``: positions, names, or None for
    every array whose name contains ``"lora_"``.
    """
    if isinstance(initial, Mapping):
        names = [str(k) for k in initial]
        arrays = [_as_array(v) for v in initial.values()]
    else:
        arrays = initial_ndarrays(initial)
    if trainable is None:
        if names is None:
            raise ValueError("trainable is required when the initial model has no array names: pass the positions "
                             "of the LoRA arrays, or initial_parameters as a name -> array mapping (a state_dict)")
        return arrays, lora_positions(names)
    trainable = list(trainable)
    if trainable and all(isinstance(t, str) for t in trainable):
        if names is None:
            raise ValueError("trainable names need named initial arrays (a name -> array mapping)")
        missing = [t for t in trainable if t not in names]
        if missing:
            raise ValueError(f"trainable names {missing[:3]} are not in the model's arrays")
        return arrays, [list(names).index(t) for t in trainable]
    return arrays, trainable


class _LoRALegacy(CentralizedLegacyStrategy):
    config_cls: type = FedMeZOConfig

    def __init__(self, *, initial_parameters: Any = None, trainable: Sequence[int] | Sequence[str] | None = None,
                 num_rounds: int | None = None, **kwargs: Any) -> None:
        self.config, kwargs = split_method_kwargs(self.config_cls, kwargs)
        if initial_parameters is None:
            raise ValueError("initial_parameters is required: the whole initial model (its LoRA arrays are tuned)")
        arrays, self.trainable = model_and_trainable(initial_parameters, trainable)
        self.final_round = num_rounds
        super().__init__(initial_parameters=arrays, **kwargs)


class FedMeZO(_LoRALegacy):
    """FedMeZO (Ling et al., "On the Convergence of Zeroth-Order Federated Tuning for Large
    Language Models", KDD 2024): FedAvg of LoRA adapters that clients tune with MeZO
    zeroth-order steps, with optional personalised learning rates (Proposition 3.7).

    Parameters
    ----------
    initial_parameters : Mapping[str, array] | Parameters | list[np.ndarray]
        The whole initial model (e.g. a peft model's ``state_dict``), required.
    trainable : list[int] | list[str] | None (default: None)
        Positions or names of the tuned arrays; None = names containing ``"lora_"``.
    num_rounds : int | None (default: None)
        Total rounds, so that the last one is always evaluated.
    lr, local_steps, local_epochs, batch_size, mu, weight_decay, lr_decay, num_perturbations,
    lr_strategy, lr_alpha, lr_alpha_rel, lr_window, weighting, comm_mode, z_device, restore_mode,
    eval_every :
        Hyperparameters, see :class:`~flwr_strategies.fedmezo.config.FedMeZOConfig` (paper
        defaults: lr 1e-5, 30 steps of batch 1, mu 1e-3, frozen rates, uniform mean).
    **kwargs
        Flower's legacy ``FedAvg`` arguments (``fraction_fit``, ``min_fit_clients``,
        ``min_available_clients``, ``evaluate_fn``, ``on_fit_config_fn``, ``fraction_evaluate``...),
        ``num_partitions``, ``seed``, ``on_bad_reply``.
    """

    config_cls = FedMeZOConfig

    def build_core(self, initial_arrays, **core_kwargs: Any) -> FedMeZOServer:
        return FedMeZOServer(initial_arrays, trainable=self.trainable, config=self.config,
                             final_round=self.final_round, **core_kwargs)


class LoRAFedAvg(_LoRALegacy):
    """LoRA FedAvg: FedMeZO's backprop baseline (Ling et al., KDD 2024, "BP-based FedAvg"):
    clients run SGD on the LoRA adapters, the server averages them.

    Parameters
    ----------
    initial_parameters, trainable, num_rounds :
        As :class:`FedMeZO`.
    lr, local_steps, local_epochs, batch_size, weight_decay, momentum, lr_decay, grad_clip,
    weighting, eval_every :
        Hyperparameters, see :class:`~flwr_strategies.fedmezo.config.LoRAFedAvgConfig`.
    **kwargs
        Flower's legacy ``FedAvg`` arguments.
    """

    config_cls = LoRAFedAvgConfig

    def build_core(self, initial_arrays, **core_kwargs: Any) -> LoRAFedAvgServer:
        return LoRAFedAvgServer(initial_arrays, trainable=self.trainable, config=self.config,
                                final_round=self.final_round, **core_kwargs)
