"""Message sparsifiers of DO-ADP (Definition 2 of Huo et al.).

Top-k keeps the k entries of largest magnitude, zeroes the rest, does not rescale and uses no shared
randomness. Ties are broken by the smaller index. It is a biased contraction:
``||TopK(x) - x||^2 <= (1 - k/d) ||x||^2`` (Lemma 7). Rand-k (unscaled, ``E[RandK(x)] = (k/d) x``)
is offered as an extension only.
"""

from __future__ import annotations

import numpy as np


def top_k_indices(x: np.ndarray, k: int) -> np.ndarray:
    """Sorted int64 indices of the k largest ``|x|`` entries of a 1-D array (ties: smaller index)."""
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"top_k expects a 1-D vector, got shape {x.shape}")
    d = x.shape[0]
    if not 1 <= k <= d:
        raise ValueError(f"k must lie in [1, d] = [1, {d}], got k={k!r}")
    if k == d:
        return np.arange(d, dtype=np.int64)
    # stable sort of -|x| keeps equal magnitudes in index order, so ties go to the smaller index
    order = np.argsort(-np.abs(x), kind="stable")[:k]
    return np.sort(order).astype(np.int64)


def top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k message of ``x`` as ``(indices int64, values)`` (k of each, indices ascending)."""
    idx = top_k_indices(x, k)
    return idx, np.asarray(x)[idx].copy()


def top_k_dense(x: np.ndarray, k: int) -> np.ndarray:
    """Top-k as a dense vector (zeros outside the kept indices)."""
    idx, val = top_k(x, k)
    out = np.zeros_like(np.asarray(x))
    out[idx] = val
    return out


def rand_k(x: np.ndarray, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Unscaled Rand-k (extension): k uniformly drawn coordinates, values not rescaled."""
    x = np.asarray(x)
    d = x.shape[0]
    if not 1 <= k <= d:
        raise ValueError(f"k must lie in [1, d] = [1, {d}], got k={k!r}")
    idx = np.sort(rng.choice(d, size=k, replace=False)).astype(np.int64)
    return idx, x[idx].copy()
