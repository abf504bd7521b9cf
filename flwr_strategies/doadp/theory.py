"""Theory helpers of DO-ADP (Huo et al., Sec. IV): spectral quantities, step sizes, bounds."""

from __future__ import annotations

import numpy as np

from ..decentralized.mixing import spectral_gap  # noqa: F401  (rho = 1 - |lambda_2(W)|, defined once)


def phi(W: np.ndarray) -> float:
    """``phi = ||I - W||_2``."""
    W = np.asarray(W, dtype=np.float64)
    return float(np.linalg.norm(np.eye(W.shape[0]) - W, 2))


def gamma_theory(rho: float, phi_: float, p: float, k: int, d: int) -> float:
    """Theorem 2's consensus step ``gamma* = rho p k / (d (16 rho + rho^2 + 4 phi^2 + 2 rho phi^2) - 8 rho p k)``.

    The printed formula has rho (not rho^2, as CHOCO-SGD) in the numerator; implemented as printed.
    """
    den = d * (16 * rho + rho**2 + 4 * phi_**2 + 2 * rho * phi_**2) - 8 * rho * p * k
    return float(rho * p * k / den)


def c_const(rho: float, p: float, k: int, d: int) -> float:
    """``c = rho^2 p k / (82 d)``."""
    return float(rho**2 * p * k / (82.0 * d))


def momentum_bound(p: float, G: float, sigma: float, d: int, beta: float) -> float:
    """Lemma 2: ``E ||m_{i,t}||^2 <= p (G^2 + sigma^2 d) / (1 - beta)^2``."""
    return float(p * (G**2 + sigma**2 * d) / (1.0 - beta) ** 2)
