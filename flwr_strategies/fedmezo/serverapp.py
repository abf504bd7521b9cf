"""FedMeZO and LoRA FedAvg as Message-API strategies (run by Flower's ``start()``).

Paper: Ling, Chen, Yao, Li, Shen, "On the Convergence of Zeroth-Order Federated Tuning for Large
Language Models", KDD 2024 (arXiv:2402.05926).

Arguments: Flower's Message-API ``FedAvg`` arguments and those of the legacy classes of the same
names (:mod:`.strategy`). ``initial_arrays`` at ``start()`` is the whole model as an
``ArrayRecord(peft_model.state_dict())``; the LoRA arrays are found by name (or pass
``trainable=``). Train messages carry only the adapters (keys ``"0"``, ``"1"``..., in
``named_parameters`` order); ``evaluate_fn`` and federated evaluation get the whole model under
its ``state_dict`` names.
"""

from __future__ import annotations

from ..adapters import MessageStrategy
from . import strategy as legacy

__all__ = ["FedMeZO", "LoRAFedAvg"]


class FedMeZO(legacy._LoRA, MessageStrategy, like=legacy.FedMeZO):
    """FedMeZO (Ling et al., KDD 2024) on the Message API; as :class:`flwr_strategies.FedMeZO`."""


class LoRAFedAvg(legacy._LoRA, MessageStrategy, like=legacy.LoRAFedAvg):
    """LoRA FedAvg (FedMeZO's backprop baseline) on the Message API; as :class:`flwr_strategies.LoRAFedAvg`."""
