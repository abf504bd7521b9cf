"""Hyperparameter validation shared by DFedCata's strategy, client and reference simulator."""

from __future__ import annotations

from ..core.validation import check_choice, check_range

__all__ = ["validate_dfedcata", "ANCHORS", "lr_at_round"]

#: extrapolation anchors: "prev_mixed" = paper (x_i^t - x_i^{t-1}, consecutive mixed models);
#: "prev_local" = public code (mixed model minus the client's own previous local model).
ANCHORS = ("prev_mixed", "prev_local")


def validate_dfedcata(beta: float, lam: float, lr: float | None = None, anchor: str = "prev_mixed") -> None:
    """Raise ``ValueError`` unless ``0 <= beta < 1``, ``lam >= 0``, ``lr * lam < 1``."""
    check_range("beta", beta, 0.0, 1.0, high_open=True)
    check_range("lam", lam, 0.0)
    if lr is not None and check_range("lr", lr, 0.0, low_open=True) * lam >= 1.0:
        raise ValueError(f"lr * lam must be < 1 (geometric weights (1 - lr*lam)^k), got lr={lr!r}, lam={lam!r}")
    check_choice("extrapolation_anchor", anchor, ANCHORS)


def lr_at_round(lr0: float, decay: float, t: int) -> float:
    """eta_t = lr0 * decay^t (t = 0 for the first round)."""
    return float(lr0) * float(decay) ** int(t)
