"""Pure epsilon-DP calibration of geometrically decaying Laplace noise (DPDO and CPGT baselines).

A method that releases, at round t, a quantity whose L1 sensitivity is ``s_t`` with Laplace noise of
scale ``b_t`` spends ``eps_t = s_t / b_t`` per release (Laplace mechanism) and ``sum_t eps_t`` in
total (basic composition, exact for pure DP). When the data enter a release only through a batch of
b records drawn uniformly without replacement from q, each release is amplified to
``ln(1 + (b/q)(e^{eps_t} - 1))`` (Balle, Barthe, Gaboardi 2018, replace-one adjacency).

:func:`geometric_laplace_scale` is the closed form without amplification over an unbounded horizon
(the DPDO baseline's calibration, Huang, Mitra, Vaidya, ICDCN 2015): with ``s_t = s0 rs^t`` and
``b_t = b0 rn^t`` (``rs < rn``) the series is bounded by ``s0 / (b0 (1 - rs/rn))``; the usual ``b0 = s0 / (eps (rn - rs))`` drops the factor ``rn <= 1``
(slightly more noise). :func:`calibrate_laplace_b0` solves the finite-horizon, amplified sum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .validation import check_clip, check_epsilon

__all__ = [
    "geometric_laplace_scale",
    "geometric_laplace_epsilon",
    "pure_dp_epsilon",
    "calibrate_laplace_b0",
]


def geometric_laplace_scale(epsilon: float, s0: float, rs: float, rn: float) -> float:
    """Initial Laplace scale b0 for pure epsilon-DP over an unbounded horizon (no amplification).

    Parameters
    ----------
    epsilon : float
        Target pure-DP budget (> 0; values above 1 allowed).
    s0 : float
        L1 sensitivity of the round-0 release (> 0).
    rs : float
        Decay of the sensitivity per round (step-size decay), ``0 < rs < rn``.
    rn : float
        Decay of the noise scale per round, ``rs < rn <= 1``.
    """
    eps = check_epsilon(epsilon, upper=None)
    s0 = check_clip(s0, name="s0")
    if not 0.0 < rs < rn <= 1.0:
        raise ValueError(f"need 0 < rs < rn <= 1, got rs={rs!r}, rn={rn!r}")
    return s0 / (eps * (rn - rs))


def geometric_laplace_epsilon(b0: float, s0: float, rs: float, rn: float, T: int | None = None) -> float:
    """Epsilon spent by T rounds (``T=None``: the infinite-horizon bound) of the scheme above."""
    b0 = check_clip(b0, name="b0")
    ratio = rs / rn
    if T is None:
        return s0 / b0 / (1.0 - ratio)
    return s0 / b0 * (1.0 - ratio ** int(T)) / (1.0 - ratio)


def pure_dp_epsilon(sensitivities: Sequence[float], scales: Sequence[float], rate: float = 1.0) -> float:
    """``sum_t amp(s_t / b_t)`` with ``amp(e) = ln(1 + rate (e^e - 1))`` (identity when rate = 1)."""
    s = np.asarray(sensitivities, dtype=np.float64)
    b = np.asarray(scales, dtype=np.float64)
    if s.shape != b.shape:
        raise ValueError(f"{s.size} sensitivities but {b.size} scales")
    if (b <= 0).any() or not np.isfinite(b).all():
        raise ValueError("Laplace scales must be positive and finite")
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"sampling rate must lie in (0, 1], got rate={rate!r}")
    eps = s / b
    if rate < 1.0:
        eps = np.log1p(rate * np.expm1(np.minimum(eps, 700.0)))
    return float(eps.sum())


def calibrate_laplace_b0(epsilon: float, sensitivities: Sequence[float], decays: Sequence[float],
                         rate: float = 1.0, rel_tol: float = 1e-6) -> float:
    """Smallest b0 with ``pure_dp_epsilon(sensitivities, b0 * decays, rate) <= epsilon``.

    Parameters
    ----------
    epsilon : float
        Target pure-DP budget (> 0).
    sensitivities : sequence of float
        L1 sensitivity of each release (>= 0).
    decays : sequence of float
        Noise scale of each release relative to b0 (> 0).
    rate : float
        Sampling rate b/q of the records in each release (uniform without replacement), in (0, 1].
    """
    eps = check_epsilon(epsilon, upper=None)  # finite
    s = np.asarray(sensitivities, dtype=np.float64)
    r = np.asarray(decays, dtype=np.float64)
    if not s.any():
        raise ValueError("every release has zero sensitivity: nothing to calibrate")

    def f(b0: float) -> float:
        return pure_dp_epsilon(s, b0 * r, rate)

    lo, hi = 1e-12, 1.0
    while f(hi) > eps:
        lo, hi = hi, hi * 10.0
    while (hi - lo) > rel_tol * hi:
        mid = math.sqrt(lo * hi) if hi / lo > 4 else 0.5 * (lo + hi)
        lo, hi = (lo, mid) if f(mid) <= eps else (mid, hi)
    return float(hi)
