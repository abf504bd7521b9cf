"""Plain data classes handed to a method's strategy and client builders.

They hold everything a builder needs from the experiment (model, data, training settings) so that
strategies and clients never read command-line or run-config state themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class TrainConfig:
    """Local training settings shared by all methods.

    Parameters
    ----------
    lr : float
        Client learning rate at round 1. Must be > 0.
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

    lr: float = 0.05
    local_epochs: int | None = 1
    local_steps: int | None = None
    batch_size: int = 32
    weight_decay: float = 0.0
    momentum: float = 0.0
    lr_decay: float = 1.0
    grad_clip: float | None = None

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.local_steps is None and self.local_epochs is None:
            raise ValueError("set local_epochs or local_steps")
        if self.local_steps is not None and int(self.local_steps) < 1:
            raise ValueError(f"local_steps must be >= 1, got {self.local_steps}")
        if self.local_epochs is not None and int(self.local_epochs) < 1:
            raise ValueError(f"local_epochs must be >= 1, got {self.local_epochs}")
        if int(self.batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if not 0.0 < self.lr_decay <= 1.0:
            raise ValueError(f"lr_decay must be in (0, 1], got {self.lr_decay}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"grad_clip must be > 0 or None, got {self.grad_clip}")

    def lr_at(self, server_round: int) -> float:
        """Learning rate of round ``server_round`` (1-based)."""
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
