"""Mixing (gossip) matrices and the sparse mixing step.

A mixing matrix ``W`` is an ``m x m`` ``scipy.sparse.csr_matrix``; ``w_ij`` is the weight
client ``i`` gives to client ``j``'s model, and one gossip step is ``X_new = W @ X`` on the
contiguous ``(m, d)`` table of client models. The step costs ``O(nnz(W) * d)``
(= (edges + m) x model size), never ``m^2 x d``.

Weight rules (:func:`mixing_matrix`):

- ``"metropolis_hastings"``: ``w_ij = 1 / (1 + max(d_i, d_j))`` on edges, ``w_ii = 1 - sum``.
  Symmetric and doubly stochastic on any undirected graph.
- ``"uniform"``: ``w_ij = 1 / (deg_i + 1)`` over ``{i} u N(i)``. Row-stochastic; doubly
  stochastic only on regular graphs (ring, torus, full, circulant exponential).
- ``"auto"`` (default): uniform on regular graphs, Metropolis-Hastings otherwise.

Validation: ``W`` must be non-negative with rows summing to 1, have a positive diagonal and
be doubly stochastic, and the graph must be connected. Violations raise
:class:`MixingError` unless explicitly allowed (``allow_row_stochastic=True`` or
``allow_disconnected=True``).

Failures: :func:`restrict_to_alive` rebuilds ``W`` for a round where only some clients
replied. A failed client's row becomes the identity row (it keeps its previous model) and
its column is removed from the others' rows, which are then renormalised (``policy=
"renormalize"``, default) or which give the removed weight to themselves (``policy="self"``,
which keeps ``W`` doubly stochastic).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

__all__ = [
    "MixingError",
    "mixing_matrix",
    "validate_mixing",
    "is_doubly_stochastic",
    "second_eigenvalue_modulus",
    "spectral_gap",
    "is_connected",
    "mix",
    "mix_row",
    "restrict_to_alive",
]

_TOL = 1e-9
#: size of the column-block buffer of an in-place :func:`mix` (the only temporary it allocates)
INPLACE_BLOCK_BYTES = 64 << 20


class MixingError(ValueError):
    """Raised for an invalid mixing matrix or graph (disconnected, not doubly stochastic...)."""


def is_connected(adj: sp.spmatrix) -> bool:
    """True when the graph is connected (strongly connected for a directed graph)."""
    m = adj.shape[0]
    if m <= 1:
        return True
    symmetric = (abs(adj - adj.T)).nnz == 0
    n, _ = connected_components(adj, directed=not symmetric, connection="strong")
    return n == 1


def mixing_matrix(
    adj: sp.spmatrix,
    weights: str = "auto",
    *,
    allow_row_stochastic: bool = False,
    allow_disconnected: bool = False,
) -> sp.csr_matrix:
    """Build and validate the mixing matrix of graph ``adj`` (0/1, no self loops).

    Parameters
    ----------
    adj : scipy.sparse matrix, shape (m, m)
        ``adj[i, j] = 1`` when ``i`` receives ``j``'s model.
    weights : str (default: "auto")
        ``"auto"``, ``"uniform"`` or ``"metropolis_hastings"`` (alias ``"mh"``).
    allow_row_stochastic : bool (default: False)
        Accept a matrix whose columns do not sum to 1 (e.g. uniform weights on an irregular
        graph, as in the DFedCata reference code). Such a matrix does not preserve the network
        average.
    allow_disconnected : bool (default: False)
        Accept a graph that is not (strongly) connected.
    """
    adj = sp.csr_matrix(adj, dtype=np.float64)
    m = adj.shape[0]
    if adj.shape != (m, m):
        raise MixingError(f"adjacency must be square, got shape {adj.shape}")
    adj.setdiag(0)
    adj.eliminate_zeros()
    adj.data[:] = 1.0
    if not allow_disconnected and not is_connected(adj):
        n, _ = connected_components(adj, directed=True, connection="strong")
        raise MixingError(
            f"graph on {m} nodes is disconnected ({n} components); pass allow_disconnected=True "
            "to accept it (only sensible for time-varying graphs whose union is connected)"
        )
    w = weights.lower().replace("-", "_")
    if w == "mh":
        w = "metropolis_hastings"
    deg = np.asarray(adj.sum(axis=1)).ravel()
    symmetric = (abs(adj - adj.T)).nnz == 0
    if w == "auto":
        in_deg = np.asarray(adj.sum(axis=0)).ravel()
        regular = bool(np.all(deg == deg[0]) and np.all(in_deg == deg[0]))
        w = "uniform" if (regular or not symmetric) else "metropolis_hastings"
    coo = adj.tocoo()
    if w == "uniform":
        off = sp.csr_matrix((1.0 / (deg[coo.row] + 1.0), (coo.row, coo.col)), shape=(m, m))
        W = off + sp.diags(1.0 / (deg + 1.0))
    elif w == "metropolis_hastings":
        if not symmetric:
            raise MixingError("Metropolis-Hastings weights need an undirected (symmetric) graph")
        vals = 1.0 / (1.0 + np.maximum(deg[coo.row], deg[coo.col]))
        off = sp.csr_matrix((vals, (coo.row, coo.col)), shape=(m, m))
        W = off + sp.diags(1.0 - np.asarray(off.sum(axis=1)).ravel())
    else:
        raise MixingError(f"unknown weights {weights!r}; use 'auto', 'uniform' or 'metropolis_hastings'")
    W = sp.csr_matrix(W)
    W.sort_indices()
    validate_mixing(W, allow_row_stochastic=allow_row_stochastic)
    return W


def is_doubly_stochastic(W: sp.spmatrix, tol: float = _TOL) -> bool:
    W = sp.csr_matrix(W)
    rows = np.asarray(W.sum(axis=1)).ravel()
    cols = np.asarray(W.sum(axis=0)).ravel()
    return bool(np.all(np.abs(rows - 1) <= tol) and np.all(np.abs(cols - 1) <= tol) and (W.data >= -tol).all())


def validate_mixing(W: sp.spmatrix, *, allow_row_stochastic: bool = False, tol: float = _TOL) -> None:
    """Raise :class:`MixingError` unless ``W`` is a valid mixing matrix (see module docstring)."""
    W = sp.csr_matrix(W)
    m = W.shape[0]
    if W.shape != (m, m):
        raise MixingError(f"mixing matrix must be square, got {W.shape}")
    if W.nnz and W.data.min() < -tol:
        raise MixingError(f"mixing matrix has a negative entry ({W.data.min():.3g})")
    rows = np.asarray(W.sum(axis=1)).ravel()
    bad = np.flatnonzero(np.abs(rows - 1) > tol)
    if bad.size:
        raise MixingError(f"row {bad[0]} of the mixing matrix sums to {rows[bad[0]]:.6g}, not 1")
    if np.any(W.diagonal() <= 0):
        i = int(np.flatnonzero(W.diagonal() <= 0)[0])
        raise MixingError(f"self weight w_{i}{i} must be > 0, got {W.diagonal()[i]:.3g}")
    if not allow_row_stochastic:
        cols = np.asarray(W.sum(axis=0)).ravel()
        bad = np.flatnonzero(np.abs(cols - 1) > tol)
        if bad.size:
            raise MixingError(
                f"mixing matrix is not doubly stochastic: column {bad[0]} sums to {cols[bad[0]]:.6g}; "
                "use Metropolis-Hastings weights or pass allow_row_stochastic=True"
            )


def second_eigenvalue_modulus(W: sp.spmatrix) -> float:
    """psi = second-largest eigenvalue modulus of ``W`` (one eigenvalue 1 removed).
    Dense eigensolve: O(m^3), intended for m up to a few hundred."""
    A = sp.csr_matrix(W).toarray()
    m = A.shape[0]
    if m == 1:
        return 0.0
    ev = np.linalg.eigvalsh(A) if np.allclose(A, A.T) else np.linalg.eigvals(A)
    # drop one eigenvalue closest to 1 (the consensus direction)
    k = int(np.argmin(np.abs(ev - 1.0)))
    return float(np.abs(np.delete(ev, k)).max())


def spectral_gap(W: sp.spmatrix) -> float:
    """``1 - psi``."""
    return 1.0 - second_eigenvalue_modulus(W)


def mix(W: sp.spmatrix, X: np.ndarray, out: np.ndarray | None = None, block: int | None = None) -> np.ndarray:
    """One gossip step ``W @ X`` on the contiguous ``(m, d)`` table ``X``.

    Neighbour-list axpys on contiguous rows (``out_i = sum_j w_ij x_j`` over the non-zeros of
    row i), so the cost is ``nnz(W) * d`` multiply-adds and no ``m x d`` temporary is needed.
    ``out`` may be ``X`` itself: the table is then processed in column blocks through a
    ``m x block`` buffer (about 64 MiB by default). Weights are applied in ``X.dtype``.
    Single-threaded (torch's CPU kernels on zero-copy views of the numpy arrays).
    """
    import torch

    W = sp.csr_matrix(W)
    m, d = X.shape
    if W.shape != (m, m):
        raise MixingError(f"mixing matrix shape {W.shape} does not match table with {m} rows")
    if not X.flags["C_CONTIGUOUS"] or not X.flags["WRITEABLE"]:
        X = np.ascontiguousarray(X).copy()
    inplace = out is not None and np.shares_memory(out, X)
    if out is None:
        out = np.empty_like(X)
    elif out.shape != X.shape or out.dtype != X.dtype or not out.flags["C_CONTIGUOUS"]:
        raise ValueError("out must be a C-contiguous array with the shape and dtype of X")
    if block is None:
        block = max(1, INPLACE_BLOCK_BYTES // max(1, m * X.itemsize)) if inplace else max(d, 1)
    Xt = torch.from_numpy(X)
    Ot = torch.from_numpy(out)
    # the block buffer is a NumPy allocation, so memory tools that trace NumPy (tracemalloc) see it
    tmp = torch.from_numpy(np.empty((m, min(block, d)), dtype=X.dtype)) if inplace else None
    indptr, indices, data = W.indptr, W.indices, W.data.astype(np.float64)
    for s0 in range(0, d, block):
        e0 = min(d, s0 + block)
        Xb = Xt[:, s0:e0]
        Ob = tmp[:, : e0 - s0] if inplace else Ot[:, s0:e0]
        for i in range(m):
            _combine(Xb, indices, data, indptr[i], indptr[i + 1], Ob[i])
        if inplace:
            Ot[:, s0:e0].copy_(Ob)
    return out


def mix_row(W: sp.spmatrix, X: np.ndarray, i: int, out: np.ndarray | None = None) -> np.ndarray:
    """Row ``i`` of ``W @ X``: ``sum_j w_ij x_j`` over the non-zeros of row ``i``, in ``X.dtype``.

    The same arithmetic as row ``i`` of :func:`mix` (one multiply, then axpys in column order), at
    a cost of ``nnz(row i) * d``; no conversion of the table to another dtype. ``out`` (shape
    ``(d,)``, ``X.dtype``) must not overlap the rows it reads.
    """
    import torch

    W = sp.csr_matrix(W)
    m, d = X.shape
    if W.shape != (m, m):
        raise MixingError(f"mixing matrix shape {W.shape} does not match table with {m} rows")
    if not 0 <= int(i) < m:
        raise IndexError(f"row {i} outside 0..{m - 1}")
    if out is None:
        out = np.empty(d, dtype=X.dtype)
    elif out.shape != (d,) or out.dtype != X.dtype:
        raise ValueError(f"out must have shape ({d},) and dtype {X.dtype}")
    _combine(torch.from_numpy(np.ascontiguousarray(X)), W.indices, W.data.astype(np.float64), W.indptr[i],
             W.indptr[i + 1], torch.from_numpy(out))
    return out


def _combine(X, indices: np.ndarray, data: np.ndarray, a: int, b: int, out) -> None:
    """``out = sum_k data[k] X[indices[k]]`` over ``k = a..b-1`` (a CSR row's slice; ``X`` and ``out``
    torch tensors): one multiply, then axpys in column order; zero for an empty row."""
    import torch

    if a == b:
        out.zero_()
        return
    torch.mul(X[int(indices[a])], float(data[a]), out=out)
    for k in range(a + 1, b):
        out.add_(X[int(indices[k])], alpha=float(data[k]))


def restrict_to_alive(W: sp.spmatrix, alive: np.ndarray, policy: str = "renormalize") -> sp.csr_matrix:
    """Mixing matrix for a round in which only clients with ``alive[i]`` replied.

    Dead clients keep their own row only (``w_ii = 1``: they keep their previous model) and
    disappear from every other row. ``policy="renormalize"`` rescales each live row to sum to
    1 (row-stochastic); ``policy="self"`` adds the removed weight to the live client's own
    weight (keeps a doubly stochastic ``W`` doubly stochastic).
    """
    alive = np.asarray(alive, dtype=bool)
    W = sp.csr_matrix(W, dtype=np.float64).tocoo()
    m = W.shape[0]
    if alive.shape != (m,):
        raise ValueError(f"alive mask must have shape ({m},), got {alive.shape}")
    keep = alive[W.row] & alive[W.col]
    r, c, v = W.row[keep], W.col[keep], W.data[keep]
    R = sp.csr_matrix((v, (r, c)), shape=(m, m))
    dead = np.flatnonzero(~alive)
    sums = np.asarray(R.sum(axis=1)).ravel()
    if policy == "renormalize":
        scale = np.where(alive, 1.0 / np.where(sums > 0, sums, 1.0), 0.0)
        R = sp.diags(scale) @ R
    elif policy == "self":
        R = R + sp.diags(np.where(alive, 1.0 - sums, 0.0))
    else:
        raise ValueError(f"unknown failure policy {policy!r}; use 'renormalize' or 'self'")
    R = sp.csr_matrix(R + sp.csr_matrix((np.ones(dead.size), (dead, dead)), shape=(m, m)))
    R.sort_indices()
    return R
