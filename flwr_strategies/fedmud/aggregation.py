"""Direct aggregation of FedMUD's exchanged arrays (FedMUD paper, Eq. 4).

The server averages every exchanged array element-wise (trainable factors, dense parameters, BN
statistics). Weights are proportional to the clients' example counts (default) or uniform.
With patterns ``freeze`` and ``aad`` the update is linear in the trainable factors, so the average
of the factors yields exactly the average of the clients' updates (Eq. 9); with ``ab`` it does not
(Eqs. 6-7).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..core.aggregation import aggregation_weights

__all__ = ["aggregation_weights", "weighted_mean"]


def weighted_mean(payloads: Sequence[Sequence[np.ndarray]], weights: Sequence[float]) -> list[np.ndarray]:
    """Element-wise ``sum_i p_i * payload_i`` for lists of equally shaped arrays (float64 accumulation)."""
    if len(payloads) != len(weights) or not payloads:
        raise ValueError(f"{len(payloads)} payloads for {len(weights)} weights")
    out = []
    for arrays in zip(*payloads):
        acc = np.zeros(arrays[0].shape, dtype=np.float64)
        for w, a in zip(weights, arrays):
            acc += float(w) * np.asarray(a, dtype=np.float64)
        out.append(acc.astype(arrays[0].dtype, copy=False))
    return out
