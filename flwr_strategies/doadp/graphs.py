"""Graph helpers used by DO-ADP's experiments (circulant ring with +-1..h neighbours, W = I - L/iota).

Temporary until the shared decentralized core (flwr_strategies.decentralized) is merged.
"""

from __future__ import annotations

import numpy as np


def circulant_mixing(n: int, hops: int = 3, iota: float | None = None) -> np.ndarray:
    """W = I - L/iota for the graph with edges (i, i +- j mod n), j = 1..hops; iota default d_max + 1."""
    A = np.zeros((n, n))
    for i in range(n):
        for j in range(1, hops + 1):
            A[i, (i + j) % n] = A[i, (i - j) % n] = 1.0
    deg = A.sum(axis=1)
    iota = deg.max() + 1.0 if iota is None else float(iota)
    if iota <= deg.max():
        raise ValueError(f"iota must exceed the maximum degree {deg.max()}, got iota={iota!r}")
    return np.eye(n) - (np.diag(deg) - A) / iota
