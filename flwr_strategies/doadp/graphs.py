"""The DO-ADP paper's mixing matrices, dense, for its theory (Sec. IV) and reference simulator.

Huo et al. (Sec. V) link agent i to ``(i +- j) mod n`` for ``j = 1..J`` (J = 3: a 6-regular
circulant on 20 agents), the ``circulant`` topology of
:mod:`flwr_strategies.decentralized.topology` with ``neighbours = 2 J + 1``. Mixing weights follow
:func:`flwr_strategies.decentralized.mixing.mixing_matrix`: on a regular graph ``"uniform"`` gives
``W = I - L / (d_max + 1)``; another ``iota > d_max`` gives the family ``W = I - L / iota`` that the
paper's Assumption 1 admits.
"""

from __future__ import annotations

import numpy as np

from ..core.validation import check_integer
from ..decentralized.mixing import mixing_matrix
from ..decentralized.topology import circulant

__all__ = ["circulant_mixing"]


def circulant_mixing(n: int, hops: int = 3, iota: float | None = None) -> np.ndarray:
    """Dense W of the circulant graph ``(i +- 1..hops) mod n`` (neighbourhoods of ``2 hops + 1``; the
    offsets wrap around on small n); ``iota=None``: uniform weights (iota = d_max + 1)."""
    A = circulant(int(n), 2 * check_integer("hops", hops, 1) + 1)
    if iota is None:
        return mixing_matrix(A, "uniform").toarray()
    D = A.toarray()
    deg = D.sum(axis=1)
    if not iota > deg.max():
        raise ValueError(f"iota must exceed the maximum degree {deg.max():g}, got iota={iota!r}")
    return np.eye(n) - (np.diag(deg) - D) / float(iota)
