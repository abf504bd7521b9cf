"""Hyperparameter validation shared by DFedCata's strategy, client and reference simulator."""

from __future__ import annotations

import math

__all__ = ["validate_dfedcata", "ANCHORS", "lr_at_round"]

#: extrapolation anchors: "prev_mixed" = paper (x_i^t - x_i^{t-1}, consecutive mixed models);
#: "prev_local" = public code (mixed model minus the client's own previous local model).
ANCHORS = ("prev_mixed", "prev_local")


def validate_dfedcata(beta: float, lam: float, lr: float | None = None, anchor: str = "prev_mixed") -> None:
    """Raise ``ValueError`` unless ``0 <= beta < 1``, ``lam >= 0``, ``lr * lam < 1``."""
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and 0.0 <= beta < 1.0):
        raise ValueError(f"beta (extrapolation) must be in [0, 1), got {beta!r}")
    if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam >= 0.0):
        raise ValueError(f"lam (Moreau-envelope penalty) must be >= 0, got {lam!r}")
    if lr is not None:
        if not (math.isfinite(lr) and lr > 0):
            raise ValueError(f"lr must be > 0, got {lr!r}")
        if lr * lam >= 1.0:
            raise ValueError(f"lr * lam must be < 1 (geometric weights (1 - lr*lam)^k), got lr={lr!r}, lam={lam!r}")
    if anchor not in ANCHORS:
        raise ValueError(f"extrapolation_anchor must be one of {ANCHORS}, got {anchor!r}")


def lr_at_round(lr0: float, decay: float, t: int) -> float:
    """eta_t = lr0 * decay^t (t = 0 for the first round)."""
    return float(lr0) * float(decay) ** int(t)
