"""FedLi-LS Flower strategy: clients run Armijo-SGD, the server takes ``w - eta_g * Delta_t`` (spec §3)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
from flwr.common import Scalar

from .aggregation import aggregate_delta, weighted_average
from .armijo import ArmijoConfig
from .server_ls import gd_server_step, step_size_sync, validate_step_size_sync
from .strategy_base import ClientResult, ServerModelStrategy

__all__ = ["FedLiLS"]


class FedLiLS(ServerModelStrategy):
    """FedLi-LS: hyper-parameter-free FL with stochastic Armijo line search on the clients.

    Implementation based on Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated
    Learning" (Algorithm 1 with ``client_algo="armijo_sgd"`` and ``server_algo="GD"``). Each sampled
    client runs SGD whose step size is found by a stochastic Armijo backtracking line search and
    reports the step size it accepted last (``metrics["step_size"]``). The server applies
    ``w_{t+1} = w_t - eta_g * Delta_t`` with ``Delta_t = w_t - sum_i p_i w_i``.

    Parameters
    ----------
    step_size_sync : str | float (default: "unit")
        ``eta_g``: ``"unit"`` (1.0; the case the theory covers and the authors' code uses; the update is
        then exactly FedAvg's weighted average), ``"max"`` (largest reported client step size, the
        paper's non-convex heuristic), or a constant float > 0.
    armijo : ArmijoConfig | None (default: None, i.e. ``ArmijoConfig()``)
        Line-search constants sent to the clients in the fit config every round.
    weighting : str (default: "num_examples")
        ``p_i``: ``"num_examples"`` or ``"uniform"``.
    on_nonfinite : str (default: "raise")
        ``"raise"`` or ``"drop"`` for clients reporting NaN/inf weights or step sizes.
    **kwargs
        Passed to :class:`flwr.server.strategy.FedAvg` (``initial_parameters`` required).
    """

    required_metrics = ("step_size",)

    def __init__(
        self,
        *,
        step_size_sync: str | float = "unit",
        armijo: ArmijoConfig | None = None,
        weighting: str = "num_examples",
        on_nonfinite: str = "raise",
        **kwargs: Any,
    ) -> None:
        self.step_size_sync = validate_step_size_sync(step_size_sync)
        self.armijo = armijo if armijo is not None else ArmijoConfig()
        extra = {k: v for k, v in asdict(self.armijo).items()}
        super().__init__(weighting=weighting, on_nonfinite=on_nonfinite, extra_fit_config=extra, **kwargs)

    def __repr__(self) -> str:
        return f"FedLiLS(step_size_sync={self.step_size_sync!r}, weighting={self.weighting!r}, armijo={self.armijo})"

    def server_update(self, server_round: int, results: list[ClientResult]) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        p = self.weights_of(results)
        steps = [float(r.metrics["step_size"]) for r in results]
        eta_g = step_size_sync(steps, self.step_size_sync)
        avg = weighted_average([r.arrays for r in results], p)
        delta = aggregate_delta(self.current, avg)
        new = gd_server_step(self.current, avg, eta_g)
        metrics: dict[str, Scalar] = {
            "eta_g": float(eta_g),
            "effective_scale": float(eta_g),
            "client_step_max": float(max(steps)),
            "client_step_mean": float(np.dot(p, steps)),
            "delta_norm": float(np.sqrt(sum(float(np.sum(d * d)) for d in delta))),
        }
        return new, metrics
