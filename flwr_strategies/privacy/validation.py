"""Argument checks shared by the privacy accountants.

Every check raises ``ValueError`` (or ``TypeError``) with a message that names the offending
argument and its value, so that a mis-configured experiment fails before any training starts.
"""

from __future__ import annotations

import math
import numbers


def check_epsilon(epsilon: float, *, name: str = "epsilon", upper: float | None = 1.0) -> float:
    """Return ``epsilon`` as float; raise unless ``0 < epsilon <= upper`` (``upper=None``: no upper bound)."""
    eps = check_real(epsilon, name)
    if not eps > 0.0:
        raise ValueError(f"{name} must be positive, got {name}={epsilon!r}")
    if upper is not None and eps > upper:
        raise ValueError(
            f"{name} must lie in (0, {upper}] (Theorem 1 of Huo et al. needs epsilon <= 1), "
            f"got {name}={epsilon!r}"
        )
    return eps


def check_delta(delta: float, *, name: str = "delta0") -> float:
    """Return ``delta`` as float; raise unless ``0 < delta < 1``."""
    d = check_real(delta, name)
    if not 0.0 < d < 1.0:
        raise ValueError(f"{name} must lie in the open interval (0, 1), got {name}={delta!r}")
    return d


def check_activation(p: float, *, allow_low_p: bool = False, name: str = "p") -> float:
    """Return the activation probability; raise unless ``1/2 <= p <= 1``.

    With ``allow_low_p=True`` any ``0 < p <= 1`` is accepted (the privacy chain holds for every p;
    only DO-ADP's convergence proof needs ``p >= 1/2``; DP-DDA's node sampling uses e.g. 0.24).
    """
    pf = check_real(p, name)
    ok = (0.0 < pf <= 1.0) if allow_low_p else (0.5 <= pf <= 1.0)
    if not ok:
        interval = "(0, 1]" if allow_low_p else "[1/2, 1]"
        hint = "" if allow_low_p else " (pass allow_low_p=True to accept 0 < p < 1/2)"
        raise ValueError(f"{name} must lie in {interval}, got {name}={p!r}{hint}")
    return pf


def check_k(k: int, d: int) -> tuple[int, int]:
    """Return ``(k, d)``; raise unless both are integers with ``d >= 1`` and ``1 <= k <= d``."""
    d = check_positive_int(d, "d")
    if not isinstance(k, numbers.Integral) or isinstance(k, bool):
        raise TypeError(f"k must be an integer, got k={k!r}")
    if not 1 <= int(k) <= d:
        raise ValueError(f"k must lie in [1, d] = [1, {d}], got k={k!r}")
    return int(k), d


def check_clip(G: float, *, name: str = "G") -> float:
    """Return the clipping bound; raise unless it is positive and finite."""
    g = check_real(G, name)
    if not (g > 0.0 and math.isfinite(g)):
        raise ValueError(f"clip bound {name} must be positive and finite, got {name}={G!r}")
    return g


def check_positive_int(value: int, name: str) -> int:
    """Return ``value`` as int; raise unless it is an integer >= 1."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {name}={value!r}")
    if int(value) < 1:
        raise ValueError(f"{name} must be >= 1, got {name}={value!r}")
    return int(value)


def check_real(value, name: str) -> float:
    """Return ``value`` as float; raise unless it is a real number (not a bool) other than NaN."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {name}={value!r}")
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"{name} must not be NaN, got {name}={value!r}")
    return v
