"""Pure epsilon-DP calibration of geometrically decaying Laplace noise (DPDO and CPGT baselines).

A method that releases, at every round t, a quantity whose L1 sensitivity is ``s0 * rs^t`` with
Laplace noise of scale ``b0 * rn^t`` is ``sum_t s0 rs^t / (b0 rn^t)``-DP. With ``rs < rn`` the
geometric series is bounded by ``s0 / (b0 (1 - rs/rn))`` for any horizon, so

    b0 = s0 / (epsilon (1 - rs/rn)) = s0 rn / (epsilon (rn - rs)).

The spec's DPDO form ``b0 = 2 G sqrt(d) c / (q eps (rn - rs))`` is this bound with
``s0 = 2 G sqrt(d) c / q`` and the factor ``rn`` (<= 1) dropped, i.e. slightly more noise.
"""

from __future__ import annotations

from .validation import check_clip, check_epsilon


def geometric_laplace_scale(epsilon: float, s0: float, rs: float, rn: float) -> float:
    """Initial Laplace scale b0 for pure epsilon-DP over an unbounded horizon.

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
