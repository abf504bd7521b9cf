"""FedExP Flower strategy (Jhunjhunwala, Wang, Joshi, ICLR 2023), a FedLi baseline (spec §6)."""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.common import Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays

from .fedexp import fedexp_server_step, validate_eps
from .strategy_base import ClientResult, ServerModelStrategy

__all__ = ["FedExP"]


class FedExP(ServerModelStrategy):
    """FedExP: server step size from the extrapolation rule of POCS.

    Implementation based on Jhunjhunwala et al., "FedExP: Speeding Up Federated Averaging via
    Extrapolation" (ICLR 2023). With ``Delta_i = w_t - w_i`` and their uniform mean ``Dbar``:
    ``eta_g = max(1, sum_i ||Delta_i||^2 / (2 S (||Dbar||^2 + eps)))`` and ``w_{t+1} = w_t - eta_g Dbar``.

    Parameters
    ----------
    eps : float (default: 1e-3)
        Stabiliser in the denominator; the FedLi paper's grid is {1e-3, 10^-2.5, 1e-2, 10^-1.5, 1e-1}
        (1e-3 best). Must be finite and >= 0.
    eval_last2_avg : bool (default: False)
        Evaluate the average of the last two global iterates (as the original FedExP does); the FedLi
        paper does not mention it, so it is off.
    **kwargs
        Passed to :class:`flwr.server.strategy.FedAvg` (``initial_parameters`` required). The model mean
        is uniform over the participating clients, as in the original (``weighting`` is fixed).
    """

    def __init__(self, *, eps: float = 1e-3, eval_last2_avg: bool = False, on_nonfinite: str = "raise", **kwargs: Any) -> None:
        self.eps = validate_eps(eps)
        self.eval_last2_avg = bool(eval_last2_avg)
        super().__init__(weighting="uniform", on_nonfinite=on_nonfinite, **kwargs)
        self.previous: list[np.ndarray] | None = None

    def __repr__(self) -> str:
        return f"FedExP(eps={self.eps}, eval_last2_avg={self.eval_last2_avg})"

    def server_update(self, server_round: int, results: list[ClientResult]) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        new, info = fedexp_server_step(self.current, [r.arrays for r in results], self.eps)
        self.previous = [np.array(a, copy=True) for a in self.current]
        return new, {k: float(v) for k, v in info.items()}

    def evaluate(self, server_round: int, parameters: Parameters):
        if self.eval_last2_avg and self.previous is not None:
            cur = parameters_to_ndarrays(parameters)
            avg = [
                ((a.astype(np.float64) + b.astype(np.float64)) / 2).astype(a.dtype) if np.issubdtype(a.dtype, np.floating) else a
                for a, b in zip(cur, self.previous)
            ]
            parameters = ndarrays_to_parameters(avg)
        return super().evaluate(server_round, parameters)
