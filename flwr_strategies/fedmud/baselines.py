"""Low-rank baselines compared with FedMUD (FedMUD paper, Section 5), built on the same machinery.

* FedLMT (Liu et al., ICML 2024): weight ``W = U @ V`` (no base, ``W_base = 0``), both factors
  ``Uniform(-a, a)`` once, never reset, factors averaged directly.
* FedPara (Hyeon-Woo et al., ICLR 2022): ``W = (X1 @ Y1) * (X2 @ Y2)`` on the ``m x n`` view,
  four random trainable factors, never reset, averaged directly.
* FedHM (Yao et al., 2021): the server keeps full weights; every round it factorises them by
  truncated SVD (:func:`svd_factors`), clients train ``U @ V`` and the server averages the
  recovered products ``U_i @ V_i`` (aggregation after recovery).
"""

from __future__ import annotations

import numpy as np

__all__ = ["BASELINE_SCHEMES", "svd_factors"]

# method -> (decomp, pattern, random_right, zero_base)
BASELINE_SCHEMES = {
    "fedlmt": ("mat", "ab", True, True),
    "fedhm": ("mat", "ab", True, True),
    "fedpara": ("hadamard", "ab", False, True),
}


def svd_factors(weight: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank-``rank`` factors of an ``m x n`` matrix: ``U = P_r sqrt(S_r)``, ``V = sqrt(S_r) Q_r^T``.

    ``U @ V`` is the best rank-``rank`` approximation (Eckart-Young). When ``rank`` exceeds
    ``min(m, n)`` the extra columns/rows are zero.
    """
    w = np.asarray(weight, dtype=np.float64)
    if w.ndim != 2:
        raise ValueError(f"svd_factors needs a matrix, got shape {w.shape}")
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    p, s, qt = np.linalg.svd(w, full_matrices=False)
    k = min(rank, s.size)
    root = np.sqrt(s[:k])
    u = np.zeros((w.shape[0], rank))
    v = np.zeros((rank, w.shape[1]))
    u[:, :k] = p[:, :k] * root
    v[:k] = root[:, None] * qt[:k]
    return u.astype(np.float32), v.astype(np.float32)
