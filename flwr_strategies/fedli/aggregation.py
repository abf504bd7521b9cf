"""The pseudo-gradient ``Delta_t`` and FunctionSync (Geetika et al., Algorithm 1); the client weights
and the weighted average are :func:`flwr_strategies.core.aggregation.aggregation_weights` and
:func:`~flwr_strategies.core.aggregation.weighted_average`."""

from __future__ import annotations

import math
from collections.abc import Sequence
import numpy as np

from ..core.aggregation import aggregation_weights, weighted_average

__all__ = [
    "aggregate_delta",
    "aggregation_weights",
    "function_sync",
    "is_float_array",
    "weighted_average",
]


def is_float_array(a: np.ndarray) -> bool:
    """Whether the server-side update rules apply to this array (floating dtype)."""
    return np.issubdtype(np.asarray(a).dtype, np.floating)


def aggregate_delta(global_arrays: Sequence[np.ndarray], average: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``Delta_t = w_t - sum_i p_i w_i`` (float64 per array; points against the descent direction)."""
    if len(global_arrays) != len(average):
        raise ValueError(f"global model has {len(global_arrays)} arrays, average has {len(average)}")
    return [np.asarray(w, dtype=np.float64) - np.asarray(a, dtype=np.float64) for w, a in zip(global_arrays, average)]


def function_sync(losses: Sequence[float], weights: Sequence[float]) -> float:
    """FedLi-LU FunctionSync: ``f_t^g = sum_i p_i * loss_i``. Raises on a non-finite client loss."""
    if len(losses) != len(weights):
        raise ValueError(f"{len(losses)} losses but {len(weights)} weights")
    if len(losses) == 0:
        raise ValueError("no client losses to synchronise")
    for i, v in enumerate(losses):
        if not math.isfinite(float(v)):
            raise FloatingPointError(f"client {i} reported a non-finite loss {v!r}")
    return float(sum(float(p) * float(v) for p, v in zip(weights, losses)))
