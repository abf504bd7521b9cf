"""The PyTorch ``NumPyClient`` every method's client builds on."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from flwr.client import Client, NumPyClient
from flwr.common import FitIns, FitRes, Scalar

from flwr_strategies.setup import ClientSetup, TrainConfig

from flwr_strategies.core.local import evaluate

from .store import refusing_lost_state
from .training import client_generator, count_examples, get_weights, local_sgd, set_weights


def server_round(config: dict[str, Scalar]) -> int:
    """The round number of a train or evaluate config: Flower's key ``"server-round"`` (0 if absent)."""
    return int(config.get("server-round", 0))


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
    epochs or steps by default, on the one local-training loop of
    :mod:`flwr_strategies.core.local`) with a generator seeded by (seed, round, partition) and
    returns the new weights, the number of training examples and metrics that always include
    ``partition-id`` and ``train_loss``. Subclasses override :meth:`local_train` (local rule) or
    :meth:`extra_loss` (a term added to the batch loss), or ``fit`` for other wire formats.

    ``setup.train_data`` / ``setup.test_data`` are in-memory
    :class:`~flwr_strategies.clients.training.TensorData` (seeded minibatches of ``batch_size``) or
    any iterable of ``(x, y)`` batches such as a ``DataLoader`` (its own batches and order, moved to
    ``setup.device``).

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
        return client_generator(seed, server_round(config), self.partition_id, stream)

    def num_train(self) -> int:
        """Number of local training examples."""
        return count_examples(self.setup.train_data)

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
        return local_sgd(self.model, self.setup.train_data, generator=generator, extra_loss=self.extra_loss(config),
                         device=self.setup.device, **settings)

    def extra_loss(self, config: dict[str, Scalar]):
        """A callable ``model -> Tensor`` added to the batch loss, or None (default)."""
        return None

    def to_client(self) -> Client:
        """Flower's ``Client`` for this ``NumPyClient`` (what a legacy ``client_fn`` returns). Its
        ``fit`` refuses a resumed round whose client state was lost and no client-state store restored
        (:func:`~flwr_strategies.clients.store.refusing_lost_state`)."""
        client = super().to_client()
        fit = client.fit

        def fit_checked(ins: FitIns) -> FitRes:
            with refusing_lost_state(self.setup.state, ins.config, self.partition_id):
                return fit(ins)

        client.fit = fit_checked
        return client

    def evaluate(self, parameters: list[np.ndarray], config: dict[str, Scalar]):
        set_weights(self.model, parameters)
        data = self.setup.test_data if self.setup.test_data is not None else self.setup.train_data
        loss, acc, n = evaluate(self.model, data, device=self.setup.device)
        return float(loss), n, {**self.base_metrics(), "accuracy": float(acc)}
