"""A FedAvg-family Flower strategy that keeps the current global model and validates client results.

FedLi-LS, FedLi-LU, FedExP and SCAFFOLD all need ``w_t`` inside ``aggregate_fit`` (Flower passes only
the client results), one or two extra scalars per client, and a guard against non-finite reports.
This base class provides those; subclasses implement :meth:`ServerModelStrategy.server_update`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from logging import WARNING
from typing import Any

import numpy as np
from flwr.common import (
    FitIns,
    FitRes,
    Parameters,
    Scalar,
    log,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg

from .aggregation import WEIGHTINGS, aggregation_weights

__all__ = ["ClientResult", "ServerModelStrategy"]

NONFINITE_POLICIES = ("raise", "drop")


@dataclass
class ClientResult:
    """One client's reply, decoded: partition id (or -1), arrays, example count and metrics."""

    partition_id: int
    arrays: list[np.ndarray]
    num_examples: int
    metrics: dict[str, Scalar]


def _partition_id(res: FitRes, fallback: int) -> int:
    value = (res.metrics or {}).get("partition-id")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else fallback


class ServerModelStrategy(FedAvg):
    """FedAvg (Flower's sampling, evaluation and config plumbing) plus server-side model state.

    Parameters
    ----------
    weighting : str (default: "num_examples")
        Client weights ``p_i``: ``"num_examples"`` (``n_i / sum n_j``, spec §10 A5) or ``"uniform"``.
    on_nonfinite : str (default: "raise")
        What to do with a client whose weights or required scalars are NaN/inf: ``"raise"`` a
        ``FloatingPointError`` naming the client, or ``"drop"`` the client from this round (logged and
        counted in the ``dropped_nonfinite`` metric; if every client is dropped the model is kept).
        The global model is never set to NaN.
    extra_fit_config : dict | None (default: None)
        Scalars added to every client's fit config (e.g. the Armijo constants).
    **kwargs
        Passed to :class:`flwr.server.strategy.FedAvg` (``initial_parameters`` is required).
    """

    #: metric keys every client must report (checked for presence and finiteness)
    required_metrics: tuple[str, ...] = ()

    def __init__(
        self,
        *,
        weighting: str = "num_examples",
        on_nonfinite: str = "raise",
        extra_fit_config: dict[str, Scalar] | None = None,
        **kwargs: Any,
    ) -> None:
        if weighting not in WEIGHTINGS:
            raise ValueError(f"`weighting` must be one of {WEIGHTINGS}, got {weighting!r}")
        if on_nonfinite not in NONFINITE_POLICIES:
            raise ValueError(f"`on_nonfinite` must be one of {NONFINITE_POLICIES}, got {on_nonfinite!r}")
        if kwargs.get("initial_parameters") is None:
            raise ValueError(f"{type(self).__name__} needs `initial_parameters` (it keeps w_t on the server)")
        super().__init__(**kwargs)
        self.weighting = weighting
        self.on_nonfinite = on_nonfinite
        self.extra_fit_config = dict(extra_fit_config or {})
        self.current: list[np.ndarray] = parameters_to_ndarrays(kwargs["initial_parameters"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weighting={self.weighting!r}, accept_failures={self.accept_failures})"

    # ---------------------------------------------------------------------------------- fit
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        params = super().initialize_parameters(client_manager)
        if params is not None:
            self.current = parameters_to_ndarrays(params)
        return params

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        instructions = super().configure_fit(server_round, parameters, client_manager)
        if not self.extra_fit_config:
            return instructions
        return [(proxy, FitIns(ins.parameters, {**ins.config, **self.extra_fit_config})) for proxy, ins in instructions]

    def decode_result(self, res: FitRes, index: int) -> ClientResult:
        """Decode one reply (override for other wire formats)."""
        return ClientResult(
            _partition_id(res, index), parameters_to_ndarrays(res.parameters), int(res.num_examples), dict(res.metrics or {})
        )

    def _problem(self, r: ClientResult) -> str | None:
        for key in self.required_metrics:
            if key not in r.metrics:
                raise KeyError(
                    f"{type(self).__name__}: client (partition {r.partition_id}) did not report '{key}' in its fit "
                    f"metrics; is it running the matching client?"
                )
            value = r.metrics[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"client (partition {r.partition_id}) reported non-numeric '{key}' = {value!r}")
            if not math.isfinite(float(value)):
                return f"non-finite '{key}' = {value!r}"
        for j, a in enumerate(r.arrays):
            if np.issubdtype(a.dtype, np.floating) and not np.all(np.isfinite(a)):
                return f"non-finite values in array {j}"
        return None

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        if not results:
            return None, {}
        if not self.accept_failures and failures:
            return None, {}
        decoded: list[ClientResult] = []
        dropped = 0
        for i, (_, res) in enumerate(results):
            r = self.decode_result(res, i)
            problem = self._problem(r)
            if problem is not None:
                msg = f"{type(self).__name__} round {server_round}: client (partition {r.partition_id}) sent {problem}"
                if self.on_nonfinite == "raise":
                    raise FloatingPointError(msg + " (set on_nonfinite='drop' to skip such clients)")
                log(WARNING, msg + "; dropped from this round")
                dropped += 1
                continue
            decoded.append(r)
        if not decoded or sum(r.num_examples for r in decoded) == 0 and self.weighting == "num_examples":
            return None, {"dropped_nonfinite": dropped}
        new_arrays, metrics = self.server_update(server_round, decoded)
        for j, a in enumerate(new_arrays):
            if np.issubdtype(a.dtype, np.floating) and not np.all(np.isfinite(a)):
                raise FloatingPointError(f"{type(self).__name__}: server update produced non-finite array {j}")
        self.current = [np.array(a, copy=True) for a in new_arrays]
        out: dict[str, Scalar] = {}
        if self.fit_metrics_aggregation_fn:
            out.update(self.fit_metrics_aggregation_fn([(r.num_examples, r.metrics) for r in decoded]))
        out.update(metrics)
        if dropped:
            out["dropped_nonfinite"] = dropped
        return ndarrays_to_parameters(new_arrays), out

    def weights_of(self, results: list[ClientResult]) -> np.ndarray:
        """Aggregation weights ``p_i`` of ``results`` under this strategy's ``weighting``."""
        return aggregation_weights([r.num_examples for r in results], self.weighting)

    def server_update(self, server_round: int, results: list[ClientResult]) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        """Return ``(w_{t+1}, metrics)`` from ``self.current`` (``w_t``) and the decoded results."""
        raise NotImplementedError

