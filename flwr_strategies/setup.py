"""Plain data classes handed to a method's strategy and client builders.

They hold everything a builder needs from the experiment (model, data, training settings) so that
strategies and clients never read command-line or run-config state themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .core.validation import SettingError, check_integer, check_number

#: ``TrainConfig.lr`` for a method that derives its step size from its own rule.
AUTO_LR = "auto"


@dataclass
class TrainConfig:
    """Local training settings shared by all methods.

    Parameters
    ----------
    lr : float | str
        Client learning rate at round 1, > 0; or ``"auto"`` for a method that derives its step
        size from its own rule once its noise is calibrated (the DO-ADP family: see
        :data:`flwr_strategies.doadp.config.STEP_NOISE_BOUND`), ``AUTO_LR``.
    local_epochs : int | None
        Local epochs per round (E). Exactly one of ``local_epochs``/``local_steps`` is set.
    local_steps : int | None
        Local minibatch steps per round (K); takes precedence over epochs when set.
    batch_size : int
        Minibatch size. Must be >= 1.
    weight_decay : float
        L2 weight decay of local SGD. Defaults to 0.
    momentum : float
        Local SGD momentum in [0, 1). Defaults to 0.
    lr_decay : float
        Per-round multiplicative decay of ``lr`` (round r uses ``lr * lr_decay**(r-1)``), in (0, 1].
    grad_clip : float | None
        Gradient-norm clipping bound, or None for none.
    """

    lr: float | str = 0.05
    local_epochs: int | None = 1
    local_steps: int | None = None
    batch_size: int = 32
    weight_decay: float = 0.0
    momentum: float = 0.0
    lr_decay: float = 1.0
    grad_clip: float | None = None

    def __post_init__(self) -> None:
        if self.lr != AUTO_LR:
            check_number("lr", self.lr, "a finite number > 0, or 'auto'", lambda v: v > 0)
        if self.local_steps is None and self.local_epochs is None:
            raise SettingError("local_epochs", None, "an integer >= 1 when local_steps is not set")
        if self.local_steps is not None:
            check_integer("local_steps", self.local_steps, 1)
        if self.local_epochs is not None:
            check_integer("local_epochs", self.local_epochs, 1)
        check_integer("batch_size", self.batch_size, 1)
        check_number("momentum", self.momentum, "a finite number in [0, 1)", lambda v: 0.0 <= v < 1.0)
        check_number("weight_decay", self.weight_decay, "a finite number >= 0", lambda v: v >= 0)
        check_number("lr_decay", self.lr_decay, "a number in (0, 1]", lambda v: 0.0 < v <= 1.0)
        if self.grad_clip is not None:
            check_number("grad_clip", self.grad_clip, "a finite number > 0, or None for no clipping", lambda v: v > 0)

    def lr_at(self, server_round: int) -> float:
        """Learning rate of round ``server_round`` (1-based); ``lr="auto"`` has none here (the
        method's core resolves it) and raises."""
        if self.lr == AUTO_LR:
            raise ValueError("lr='auto' is resolved by the method's core once its noise is calibrated; "
                             "there is no round learning rate to read here")
        return float(self.lr * self.lr_decay ** max(0, server_round - 1))


@dataclass
class ServerSetup:
    """What a strategy builder gets from the experiment."""

    initial_parameters: list[np.ndarray]
    evaluate_fn: Callable[[int, list[np.ndarray], dict], tuple[float, dict] | None] | None
    num_clients: int
    fraction_fit: float
    num_rounds: int
    seed: int
    train: TrainConfig
    model_fn: Callable[[], Any]
    fit_config: Callable[[int], dict]
    num_examples: dict[int, int] = field(default_factory=dict)

    @property
    def clients_per_round(self) -> int:
        """Number of clients sampled per round: ``max(1, round(fraction_fit * num_clients))``."""
        return max(1, int(round(self.fraction_fit * self.num_clients)))


@dataclass
class ClientSetup:
    """What a client builder gets for one partition."""

    partition_id: int
    num_partitions: int
    model: Any
    train_data: Any
    test_data: Any
    train: TrainConfig
    device: Any
    seed: int
    state: Any = None
