"""FedLi-LS server: StepSizeSync and the GD step ``w_{t+1} = w_t - eta_g * Delta_t``.

FedLi paper, Algorithm 1 and Section 3; its appendix runs every FedLi method with ``eta_g = 1``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..core.validation import check_number, check_range
from .aggregation import is_float_array

__all__ = ["gd_server_step", "step_size_sync", "validate_step_size_sync"]


def validate_step_size_sync(mode: str | float) -> str | float:
    """Check a ``step_size_sync`` setting: ``"unit"``, ``"max"`` or a finite float > 0."""
    if isinstance(mode, str):
        if mode in ("unit", "max"):
            return mode
        try:
            mode = float(mode)
        except ValueError:
            raise ValueError(f'`step_size_sync` must be "unit", "max" or a float > 0, got {mode!r}') from None
    return check_number("step_size_sync", mode, '"unit", "max" or a finite float > 0', lambda v: v > 0)


def step_size_sync(step_sizes: Sequence[float], mode: str | float = "unit") -> float:
    """Server step size ``eta_g`` from the clients' last accepted step sizes.

    ``"unit"`` (default): 1.0, the value the convergence theory, the appendix and the authors' code use.
    ``"max"``: ``max_i step_size_i`` (the paper's non-convex heuristic). A float: that constant.

    Raises ``FloatingPointError`` if a reported step size is not finite and ``ValueError`` if one is
    not > 0 (an Armijo step is always positive), whatever the mode, so that bad clients are never silent.
    """
    mode = validate_step_size_sync(mode)
    steps = [float(s) for s in step_sizes]
    for i, s in enumerate(steps):
        if not math.isfinite(s):
            raise FloatingPointError(f"client {i} reported a non-finite step size {s!r}")
        if s <= 0:
            raise ValueError(f"client {i} reported a step size <= 0 ({s!r})")
    if mode == "unit":
        return 1.0
    if mode == "max":
        if not steps:
            raise ValueError('step_size_sync="max" needs at least one reported step size')
        return max(steps)
    return float(mode)


def gd_server_step(
    global_arrays: Sequence[np.ndarray], average: Sequence[np.ndarray], eta_g: float
) -> list[np.ndarray]:
    """``w_{t+1} = w_t - eta_g * (w_t - avg)`` on floating arrays, cast back to each array's dtype.

    With ``eta_g == 1`` the weighted average itself is returned (bit-identical to FedAvg). Non-float
    arrays (e.g. counters) always take the average.
    """
    check_range("eta_g", eta_g, 0.0, low_open=True)
    if len(global_arrays) != len(average):
        raise ValueError(f"global model has {len(global_arrays)} arrays, average has {len(average)}")
    if eta_g == 1.0:
        return [np.array(a, copy=True) for a in average]
    out = []
    for w, a in zip(global_arrays, average):
        if not is_float_array(w):
            out.append(np.array(a, copy=True))
            continue
        w64 = np.asarray(w, dtype=np.float64)
        new = w64 - eta_g * (w64 - np.asarray(a, dtype=np.float64))
        out.append(new.astype(np.asarray(w).dtype))
    return out
