"""Constructors in Flower's own vocabulary for centralized (server-model) methods, both APIs.

:class:`CentralizedLegacyStrategy` takes the legacy ``FedAvg`` arguments (``fraction_fit``,
``min_fit_clients``, ``initial_parameters``, ``evaluate_fn``, ``on_fit_config_fn``...);
:class:`CentralizedMessageStrategy` takes the Message-API ``FedAvg`` arguments (``fraction_train``,
``min_train_nodes``, ...). A method subclasses each once and implements ``build_core``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.common import Parameters, Scalar, parameters_to_ndarrays

from ..core.server import ServerCore
from .legacy import LegacyEvalFn, LegacyStrategy
from .message import MessageStrategy

__all__ = ["CentralizedLegacyStrategy", "CentralizedMessageStrategy", "initial_ndarrays"]


def initial_ndarrays(initial_parameters: Parameters | list[np.ndarray] | None) -> list[np.ndarray]:
    """``initial_parameters`` (Flower ``Parameters`` or a list of arrays) as arrays; required."""
    if initial_parameters is None:
        raise ValueError("initial_parameters is required: the strategy keeps the global model on the server")
    if isinstance(initial_parameters, Parameters):
        return parameters_to_ndarrays(initial_parameters)
    return [np.asarray(a) for a in initial_parameters]


class CentralizedLegacyStrategy(LegacyStrategy):
    """Legacy-API strategy of a server-model method, with Flower's legacy ``FedAvg`` arguments.

    Parameters
    ----------
    initial_parameters : Parameters | list[np.ndarray]
        Initial global model (required).
    fraction_fit : float (default: 1.0)
        Fraction of clients sampled each round, in (0, 1].
    fraction_evaluate : float (default: 0.0)
        Fraction of clients asked for federated evaluation, in [0, 1].
    min_fit_clients : int (default: 1)
        Minimum number of clients sampled each round, >= 1.
    min_evaluate_clients : int (default: 0)
        Minimum number of clients in federated evaluation, >= 0.
    min_available_clients : int (default: 1)
        Clients that must be connected before a round starts, >= 1.
    evaluate_fn : callable | None (default: None)
        ``evaluate_fn(server_round, ndarrays, config) -> (loss, metrics)`` on the global model.
    on_fit_config_fn : callable | None (default: None)
        ``server_round -> dict`` sent to every client (lr, epochs, seed...).
    accept_failures : bool (default: True)
        Aggregate rounds in which some clients failed.
    num_partitions : int | None (default: None)
        Number of partitions, when known (per-client state and id checks).
    seed : int (default: 0)
        Seed of the client sampling, >= 0.
    on_bad_reply : str (default: "drop")
        ``"drop"`` or ``"raise"`` (see :mod:`flwr_strategies.core.validation`).
    **kwargs
        Further :class:`LegacyStrategy` arguments (``partition_resolver``, ``on_round_end``).
    """

    def __init__(
        self,
        *,
        initial_parameters: Parameters | list[np.ndarray] | None = None,
        fraction_fit: float = 1.0,
        fraction_evaluate: float = 0.0,
        min_fit_clients: int = 1,
        min_evaluate_clients: int = 0,
        min_available_clients: int = 1,
        evaluate_fn: LegacyEvalFn | None = None,
        on_fit_config_fn: Callable[[int], dict[str, Scalar]] | None = None,
        accept_failures: bool = True,
        num_partitions: int | None = None,
        seed: int = 0,
        on_bad_reply: str = "drop",
        **kwargs: Any,
    ) -> None:
        core = self.build_core(
            initial_ndarrays(initial_parameters),
            num_partitions=num_partitions,
            fraction_train=fraction_fit,
            min_train=min_fit_clients,
            seed=seed,
            on_train_config=on_fit_config_fn,
        )
        super().__init__(
            core,
            evaluate_fn=evaluate_fn,
            on_bad_reply=on_bad_reply,
            accept_failures=accept_failures,
            fraction_evaluate=fraction_evaluate,
            min_evaluate_clients=min_evaluate_clients,
            min_available_clients=min_available_clients,
            **kwargs,
        )

    def build_core(self, initial_arrays: list[np.ndarray], **core_kwargs: Any) -> ServerCore:
        """The method's core (``core_kwargs``: the :class:`ServerCore` base arguments)."""
        raise NotImplementedError


class CentralizedMessageStrategy(MessageStrategy):
    """Message-API strategy of a server-model method (Flower's ``FedAvg`` arguments; see
    :class:`~flwr_strategies.adapters.message.MessageStrategy`). Subclasses implement
    :meth:`build_method_core`."""

    def build_core(self, initial_arrays: list[np.ndarray], num_partitions: int) -> ServerCore:
        return self.build_method_core(initial_arrays, num_partitions=num_partitions, **self.core_kwargs())

    def build_method_core(self, initial_arrays: list[np.ndarray], **core_kwargs: Any) -> ServerCore:
        """The method's core (``core_kwargs``: the :class:`ServerCore` base arguments)."""
        raise NotImplementedError
