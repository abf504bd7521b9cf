"""Nesterov (Catalyst) extrapolation between rounds: ``x_{i,0} = x_i + beta (x_i - a_i)``.

``a_i`` is ``x_i^{t-1}`` (client i's previous *mixed* model, paper Algorithm 1, default) or
``x_{i,K}^{t-1}`` (its previous *local* model, the official code's relaxed initialisation).
"""

from __future__ import annotations

import numpy as np

__all__ = ["extrapolate"]


def extrapolate(X: np.ndarray, A: np.ndarray, beta: float, out: np.ndarray | None = None) -> np.ndarray:
    """Row-wise ``X + beta (X - A)``; returns a copy of ``X`` (bit-exact) when ``beta == 0``."""
    if out is None:
        out = np.empty_like(X)
    if beta == 0:
        np.copyto(out, X)
        return out
    np.subtract(X, A, out=out)
    out *= X.dtype.type(beta)
    out += X
    return out
