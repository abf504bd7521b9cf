"""The paper's graphs on the shared decentralized core: ring with +-1..h neighbours (circulant).

``ring_topology(n, hops)`` is the core's ``watts_strogatz`` ring lattice with ``k = 2 hops`` and
rewiring probability 0; ``circulant_mixing`` returns its dense mixing matrix. The core's ``uniform``
weights on this regular graph are ``W = I - L/iota`` with ``iota = d_max + 1`` (the spec's default);
another ``iota`` (> d_max) gives the spec's family ``W = I - L/iota``.
"""

from __future__ import annotations

import numpy as np

from ..decentralized import Topology, mixing_matrix


def ring_topology(n: int, hops: int = 3, seed: int = 0) -> Topology:
    """Static ring lattice: agent i linked to i +- 1..hops (mod n)."""
    return Topology("watts_strogatz", n, seed=seed, k=2 * int(hops), p=0.0)


def circulant_mixing(n: int, hops: int = 3, iota: float | None = None) -> np.ndarray:
    """Dense W of :func:`ring_topology`; ``iota=None``: the core's uniform weights (iota = d_max + 1)."""
    adj = ring_topology(n, hops).graph(0)
    if iota is None:
        return mixing_matrix(adj, "uniform").toarray()
    A = adj.toarray().astype(float)
    deg = A.sum(axis=1)
    if iota <= deg.max():
        raise ValueError(f"iota must exceed the maximum degree {deg.max()}, got iota={iota!r}")
    return np.eye(n) - (np.diag(deg) - A) / float(iota)
