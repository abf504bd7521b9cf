"""Network average and consensus distance of a ``(m, d)`` table of client models."""

from __future__ import annotations

import numpy as np

__all__ = ["network_average", "consensus_distance"]


def network_average(X: np.ndarray) -> np.ndarray:
    """``x_bar = (1/m) sum_i x_i`` (float64 accumulation, returned in ``X.dtype``)."""
    return X.mean(axis=0, dtype=np.float64).astype(X.dtype, copy=False)


def consensus_distance(X: np.ndarray, chunk: int = 1 << 16) -> float:
    """``(1/m) sum_i ||x_i - x_bar||^2`` (0 iff all clients hold the same model)."""
    m, d = X.shape
    total = 0.0
    for s in range(0, d, chunk):
        blk = X[:, s : s + chunk].astype(np.float64)
        blk -= blk.mean(axis=0, keepdims=True)
        total += float(np.einsum("ij,ij->", blk, blk))
    return total / m
