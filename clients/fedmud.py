"""FedMUD client (and FedLMT / FedPara / FedHM clients): trains only the decomposition's factors.

Li et al., ICML 2025 (spec 004). The client rebuilds the round's model from the received payload
and seeds (:class:`flwr_strategies.fedmud.MUDClientCore`), keeps its ``W_base`` in
``context.state`` between rounds (written only after a successful round), runs plain local SGD
on the trainable factors and dense parameters, and returns only those.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.common import ArrayRecord, ConfigRecord, Scalar

from flwr_strategies.fedmud import MUDClientCore, MUDOptions
from flwr_strategies.setup import ClientSetup

from .base import TorchClient, train_settings
from .training import local_sgd

_PLANS: dict[tuple, Any] = {}


class FedMUDClient(TorchClient):
    """:class:`TorchClient` with FedMUD's wire format.

    Parameters
    ----------
    setup : ClientSetup
    params : dict
        Method hyper-parameters (see :class:`flwr_strategies.fedmud.MUDOptions`).
    options : MUDOptions
        The resolved options (must match the strategy's).
    """

    def __init__(self, setup: ClientSetup, params: dict[str, Any] | None, options: MUDOptions) -> None:
        super().__init__(setup, params)
        self.options = options
        self._local_state: dict[str, Any] = {}

    def _core(self) -> MUDClientCore:
        key = (self.options, tuple((k, tuple(v.shape)) for k, v in self.model.state_dict().items()))
        core = MUDClientCore(self.model, self.options, plan=_PLANS.get(key))
        _PLANS[key] = core.dm.plan
        return core

    def _load_state(self):
        st = self.setup.state if self.setup.state is not None else self._local_state
        if "fedmud_base" not in st:
            return None
        return st["fedmud_base"].to_numpy_ndarrays(), int(st["fedmud_meta"]["merges"])

    def _save_state(self, stored) -> None:
        if stored is None:
            return
        st = self.setup.state if self.setup.state is not None else self._local_state
        st["fedmud_base"] = ArrayRecord([np.ascontiguousarray(a) for a in stored[0]])
        st["fedmud_meta"] = ConfigRecord({"merges": int(stored[1])})

    def fit(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        core = self._core()
        stored = core.receive(parameters, dict(config), self._load_state())
        settings = train_settings(config, self.setup.train)
        metrics = local_sgd(core.dm.model, self.setup.train_data, generator=self.generator(config), **settings)
        self._save_state(stored)
        return core.payload(), self.num_train(), {**self.base_metrics(), **metrics}

    def evaluate(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        return 0.0, 0, self.base_metrics()
