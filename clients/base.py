"""The PyTorch ``NumPyClient`` every method's client builds on."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from flwr.client import NumPyClient
from flwr.common import Scalar

from flwr_strategies.setup import ClientSetup, TrainConfig

from .training import client_generator, evaluate_model, get_weights, local_sgd, set_weights


def train_settings(config: dict[str, Scalar], default: TrainConfig) -> dict[str, Any]:
    """Local-training settings of this round: the server's ``config`` over the client defaults.

    Keys read: ``lr``, ``local_epochs``, ``local_steps`` (0 means unset), ``batch_size``.
    """
    steps = int(config.get("local_steps", default.local_steps or 0) or 0)
    epochs = int(config.get("local_epochs", default.local_epochs or 0) or 0)
    return {
        "lr": float(config.get("lr", default.lr)),
        "epochs": epochs or None,
        "steps": steps or None,
        "batch_size": int(config.get("batch_size", default.batch_size)),
        "weight_decay": float(config.get("weight_decay", default.weight_decay)),
        "momentum": float(config.get("momentum", default.momentum)),
        "grad_clip": default.grad_clip,
    }


class TorchClient(NumPyClient):
    """A Flower ``NumPyClient`` that trains a PyTorch model on one data partition.

    ``fit`` loads the received weights, runs :meth:`local_train` (plain SGD for the configured
    epochs or steps by default) with a generator seeded by (seed, round, partition) and returns the
    new weights, the number of training examples and metrics that always include
    ``partition-id`` and ``train_loss``. Subclasses override :meth:`local_train` (local rule) or
    :meth:`extra_loss` (a term added to the batch loss), or ``fit`` for other wire formats.

    Parameters
    ----------
    setup : ClientSetup
        Model, data, training defaults, device, seed and ``context.state`` of this client.
    params : dict | None
        Method hyperparameters (resolved ``MethodSpec.defaults``). Defaults to ``{}``.
    """

    def __init__(self, setup: ClientSetup, params: dict[str, Any] | None = None) -> None:
        self.setup = setup
        self.params = dict(params or {})
        self.model: torch.nn.Module = setup.model
        self.partition_id = int(setup.partition_id)

    # -- helpers ---------------------------------------------------------------------------
    def generator(self, config: dict[str, Scalar], stream: int = 0) -> torch.Generator:
        """This round's generator (seeded by the run seed, the round and the partition id)."""
        seed = int(config.get("seed", self.setup.seed))
        return client_generator(seed, int(config.get("server-round", config.get("server_round", 0))), self.partition_id, stream)

    def num_train(self) -> int:
        """Number of local training examples."""
        return len(self.setup.train_data)

    def base_metrics(self) -> dict[str, Scalar]:
        """Metrics every reply carries."""
        return {"partition-id": self.partition_id}

    # -- NumPyClient -----------------------------------------------------------------------
    def get_properties(self, config: dict[str, Scalar]) -> dict[str, Scalar]:
        return {"partition-id": self.partition_id, "num-examples": self.num_train()}

    def get_parameters(self, config: dict[str, Scalar]) -> list[np.ndarray]:
        return get_weights(self.model)

    def fit(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        set_weights(self.model, parameters)
        metrics = self.local_train(config, self.generator(config))
        return get_weights(self.model), self.num_train(), {**self.base_metrics(), **metrics}

    def local_train(self, config: dict[str, Scalar], generator: torch.Generator) -> dict[str, Scalar]:
        """Run the local update in place on ``self.model``; return metrics (``train_loss`` at least)."""
        settings = train_settings(config, self.setup.train)
        extra = self.extra_loss(config)
        return local_sgd(
            self.model,
            self.setup.train_data,
            generator=generator,
            extra_loss=extra,
            **settings,
        )

    def extra_loss(self, config: dict[str, Scalar]):
        """A callable ``model -> Tensor`` added to the batch loss, or None (default)."""
        return None

    def evaluate(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        set_weights(self.model, parameters)
        data = self.setup.test_data if self.setup.test_data is not None else self.setup.train_data
        loss, acc = evaluate_model(self.model, data)
        return float(loss), len(data), {**self.base_metrics(), "accuracy": float(acc)}


def build_torch_client(setup: ClientSetup, params: dict[str, Any]) -> TorchClient:
    """Registry factory: plain local SGD (FedAvg, FedAdam, FedExP)."""
    return TorchClient(setup, params)
