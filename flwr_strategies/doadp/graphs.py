"""The paper's peer graph and its mixing matrix.

Huo et al. (Sec. V) link agent i to ``(i +- j) mod n`` for ``j = 1..hops`` (hops = 3: a 6-regular
circulant on 20 agents). The edge set is well defined for every n: on a small network the offsets
wrap around and the graph becomes complete (n = 4 with hops = 3 links every pair), never an error.
Mixing weights follow :func:`flwr_strategies.decentralized.mixing.mixing_matrix`: on a regular graph
``"uniform"`` gives ``W = I - L / (d_max + 1)``, the spec's default ``iota = d_max + 1``; another
``iota > d_max`` gives the spec's family ``W = I - L / iota``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..decentralized.mixing import is_connected, mixing_matrix

__all__ = ["circulant_adjacency", "circulant_mixing", "graph_mixing"]


def circulant_adjacency(n: int, hops: int = 3) -> sp.csr_matrix:
    """0/1 adjacency (no self loops) of the circulant graph with offsets ``+-1..+-hops`` mod n."""
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"number of agents must be an integer >= 1, got n={n!r}")
    if isinstance(hops, bool) or int(hops) != hops or hops < 1:
        raise ValueError(f"hops must be an integer >= 1, got hops={hops!r}")
    n, hops = int(n), int(hops)
    rows, cols = [], []
    for i in range(n):
        for j in range(1, hops + 1):
            for nb in ((i + j) % n, (i - j) % n):
                if nb != i:
                    rows.append(i)
                    cols.append(nb)
    A = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    A.data[:] = 1.0
    return A


def graph_mixing(adjacency, weights: str = "auto") -> sp.csr_matrix:
    """Validated doubly stochastic mixing matrix of a connected undirected graph (csr)."""
    A = sp.csr_matrix(adjacency, dtype=np.float64)
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"adjacency must be square, got shape {A.shape}")
    if (abs(A - A.T)).nnz:
        raise ValueError("adjacency must be symmetric (DO-ADP's public copies live on undirected edges)")
    A.setdiag(0)
    A.eliminate_zeros()
    if not is_connected(A):
        raise ValueError("the peer graph is not connected")
    return mixing_matrix(A, weights)


def circulant_mixing(n: int, hops: int = 3, iota: float | None = None) -> np.ndarray:
    """Dense W of :func:`circulant_adjacency`; ``iota=None``: uniform weights (iota = d_max + 1)."""
    A = circulant_adjacency(n, hops)
    if iota is None:
        return graph_mixing(A, "uniform").toarray()
    D = A.toarray()
    deg = D.sum(axis=1)
    if not iota > deg.max():
        raise ValueError(f"iota must exceed the maximum degree {deg.max():g}, got iota={iota!r}")
    return np.eye(n) - (np.diag(deg) - D) / float(iota)
