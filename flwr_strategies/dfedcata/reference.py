"""Framework-free DFedCata reference simulator (NumPy), for tests and small studies.

:func:`simulate` runs Algorithm 1 on a ``(m, d)`` table with a user-supplied local solver
``local_fn(i, t, x_start) -> x_end`` (e.g. a closed-form quadratic or a torch solver) and a
mixing-matrix function ``W_fn(t)``. Modes:

- synchronous (default, paper): all clients extrapolate, train, then ``X <- W^t @ Y_K``;
- ``sequential_inplace=True`` (the official code's order): clients are processed in index
  order; client i mixes the *current* table of local models (already holding this round's
  models of clients ``j < i``), extrapolates, trains and overwrites its slot. The table then
  holds local models; the returned ``X`` is the table (its mean is what the code evaluates).

``anchor`` is ``"prev_mixed"`` (paper) or ``"prev_local"`` (public code), see
:mod:`flwr_strategies.dfedcata.extrapolation`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.sparse as sp

from ..decentralized.mixing import mix, mix_row
from .extrapolation import extrapolate
from .params import validate_dfedcata

__all__ = ["simulate"]


def simulate(
    X0: np.ndarray,
    local_fn: Callable[[int, int, np.ndarray], np.ndarray],
    W_fn: Callable[[int], sp.spmatrix],
    rounds: int,
    *,
    beta: float = 0.0,
    anchor: str = "prev_mixed",
    sequential_inplace: bool = False,
    history: bool = False,
):
    """Run ``rounds`` rounds from ``X0`` (``(m, d)``; rows = x_i^0). Returns the final table
    (mixed models; local models in sequential mode) or, with ``history=True``, a dict with
    per-round lists ``X`` (tables after each round, X[0] = X0), ``Y0`` (start points) and
    ``YK`` (local results)."""
    validate_dfedcata(beta, 0.0, None, anchor)
    X = np.array(X0, copy=True)
    prev = X.copy()  # x^{-1} := x^0 (prev_mixed) or x_K^{-1} := x^0 (prev_local)
    hist = {"X": [X.copy()], "Y0": [], "YK": []}
    m = X.shape[0]
    for t in range(rounds):
        W = sp.csr_matrix(W_fn(t))
        if not sequential_inplace:
            Y0 = extrapolate(X, prev, beta)
            YK = np.stack([local_fn(i, t, Y0[i].copy()) for i in range(m)])
            new = mix(W, YK)
            prev = X if anchor == "prev_mixed" else YK
            X = new
        else:
            L = X  # table of local models (in place)
            Y0 = np.empty_like(L)
            YK = np.empty_like(L)
            for i in range(m):
                z = mix_row(W, L, i)  # row i of W @ L in L's dtype (same arithmetic as mix)
                a = prev[i] if anchor == "prev_mixed" else L[i]
                extrapolate(z, a, beta, out=Y0[i])
                if anchor == "prev_mixed":
                    prev[i] = z
                YK[i] = local_fn(i, t, Y0[i].copy())
                L[i] = YK[i]
            X = L
        if history:
            hist["X"].append(X.copy())
            hist["Y0"].append(Y0.copy())
            hist["YK"].append(YK.copy())
    return hist if history else X
