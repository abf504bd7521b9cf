"""Argument checks shared by the privacy accountants, written through :mod:`flwr_strategies.core.validation`.

Every check raises ``ValueError`` (a :class:`~flwr_strategies.core.validation.SettingError` for a value of the
wrong kind or out of range) with a message that names the offending argument and its value, so that
a mis-configured experiment fails before any training starts.
"""

from __future__ import annotations

from ..core.validation import SettingError, check_integer, check_range


def check_epsilon(epsilon: float, *, name: str = "epsilon", upper: float | None = 1.0) -> float:
    """Return ``epsilon`` as float; raise unless ``0 < epsilon <= upper`` (``upper=None``: any finite epsilon)."""
    eps = check_range(name, epsilon, 0, low_open=True)
    if upper is not None and eps > upper:
        raise ValueError(f"{name} must lie in (0, {upper}] (Theorem 1 of Huo et al. needs epsilon <= 1), "
                         f"got {name}={epsilon!r}")
    return eps


def check_delta(delta: float, *, name: str = "delta0") -> float:
    """Return ``delta`` as float; raise unless ``0 < delta < 1``."""
    return check_range(name, delta, 0, 1, low_open=True, high_open=True)


def check_activation(p: float, *, allow_low_p: bool = False, name: str = "p") -> float:
    """Return the activation probability; raise unless ``1/2 <= p <= 1``.

    With ``allow_low_p=True`` any ``0 < p <= 1`` is accepted (the privacy chain holds for every p;
    only DO-ADP's convergence proof needs ``p >= 1/2``; DP-DDA's node sampling uses e.g. 0.24).
    """
    pf = check_range(name, p, 0, 1, low_open=True)
    if pf < 0.5 and not allow_low_p:
        raise ValueError(f"{name} must lie in [1/2, 1], got {name}={p!r} (pass allow_low_p=True to accept 0 < p < 1/2)")
    return pf


def check_k(k: int, d: int) -> tuple[int, int]:
    """Return ``(k, d)``; raise unless both are integers with ``d >= 1`` and ``1 <= k <= d``."""
    d = check_positive_int(d, "d")
    k = check_integer("k", k, 1)
    if k > d:
        raise SettingError("k", k, f"in [1, d] = [1, {d}]")
    return k, d


def check_clip(G: float, *, name: str = "G") -> float:
    """Return a clipping bound (or noise scale); raise unless it is positive and finite."""
    return check_range(name, G, 0, low_open=True)


def check_positive_int(value: int, name: str) -> int:
    """Return ``value`` as int; raise unless it is an integer >= 1."""
    return check_integer(name, value, 1)
