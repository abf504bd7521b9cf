"""FedMeZO and LoRA FedAvg as legacy Flower strategies (``flwr.server.strategy``).

Paper: Ling, Chen, Yao, Li, Shen, "On the Convergence of Zeroth-Order Federated Tuning for Large
Language Models", KDD 2024 (arXiv:2402.05926).

Both take Flower's legacy ``FedAvg`` arguments (:class:`~flwr_strategies.adapters.LegacyStrategy`)
and the method's hyperparameters (the fields of :class:`~.config.FedMeZOConfig` or
:class:`~.config.LoRAFedAvgConfig`; the paper's values by default). ``initial_parameters`` is the
whole model; given as a name -> array mapping (``peft_model.state_dict()``) the LoRA arrays are
found by name, otherwise pass ``trainable=[positions]``. Clients receive and return only the
trainable arrays; ``evaluate_fn`` receives the whole model in the initial layout. A wrapper may
change the adapters of the global model (the next round sends them); it may not change frozen
arrays, which never travel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..adapters import LegacyStrategy
from ..adapters.method import LazyCore
from .config import FedMeZOConfig, LoRAFedAvgConfig

__all__ = ["FedMeZO", "LoRAFedAvg", "LORA_ARGUMENTS", "trainable_positions"]

#: The arguments both methods take besides their config's fields (see :class:`FedMeZO`).
LORA_ARGUMENTS = {"trainable": None, "num_rounds": None}


def trainable_positions(trainable: Sequence[int] | Sequence[str] | None, names: Sequence[str] | None) -> list[int]:
    """Positions of the tuned arrays: ``trainable`` positions, ``trainable`` names looked up in
    ``names``, or (None) every name containing ``"lora_"``."""
    if trainable is None:
        from .server import lora_positions

        if names is None:
            raise ValueError("trainable is required when the initial model has no array names: pass the positions "
                             "of the LoRA arrays, or the model as a name -> array mapping (a state_dict)")
        return lora_positions(names)
    trainable = list(trainable)
    if trainable and all(isinstance(t, str) for t in trainable):
        if names is None:
            raise ValueError("trainable names need named initial arrays (a name -> array mapping)")
        missing = [t for t in trainable if t not in names]
        if missing:
            raise ValueError(f"trainable names {missing[:3]} are not in the model's arrays")
        return [list(names).index(t) for t in trainable]
    return trainable


class _LoRA:
    arguments = LORA_ARGUMENTS
    renamed = {"num_rounds": "final_round"}

    def resolve_arguments(self, arguments: dict[str, Any], names: list[str] | None) -> dict[str, Any]:
        return {**arguments, "trainable": trainable_positions(arguments["trainable"], names)}


class FedMeZO(_LoRA, LegacyStrategy):
    """FedMeZO (Ling et al., "On the Convergence of Zeroth-Order Federated Tuning for Large
    Language Models", KDD 2024): FedAvg of LoRA adapters that clients tune with MeZO
    zeroth-order steps, with optional personalised learning rates (Proposition 3.7). Its
    hyperparameters are the fields of :class:`~flwr_strategies.fedmezo.config.FedMeZOConfig`.

    Parameters
    ----------
    trainable : list[int] | list[str] | None (default: None)
        Positions or names of the tuned arrays; None = names containing ``"lora_"``.
    num_rounds : int | None (default: None)
        Total rounds, so that the last one is always evaluated.
    """

    core_cls = LazyCore("flwr_strategies.fedmezo.server:FedMeZOServer")  # the server imports torch
    hyperparameters = {"config": FedMeZOConfig}


class LoRAFedAvg(_LoRA, LegacyStrategy):
    """LoRA FedAvg: FedMeZO's backprop baseline (Ling et al., KDD 2024, "BP-based FedAvg"):
    clients run SGD on the LoRA adapters, the server averages them. Its hyperparameters are the
    fields of :class:`~flwr_strategies.fedmezo.config.LoRAFedAvgConfig`.

    Parameters
    ----------
    trainable, num_rounds
        As :class:`FedMeZO`.
    """

    core_cls = LazyCore("flwr_strategies.fedmezo.server:LoRAFedAvgServer")
    hyperparameters = {"config": LoRAFedAvgConfig}
