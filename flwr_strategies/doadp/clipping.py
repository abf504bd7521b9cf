"""Per-sample gradient clipping for DO-ADP.

``coordinate`` (default) clamps every coordinate to ``[-G/sqrt(d), G/sqrt(d)]``, which enforces the
paper's Assumption 2 exactly (and implies an L2 norm <= G). ``l2`` rescales to L2 norm <= G; the
accountant must then use ``k_eff = d``. ``G=None`` disables clipping (only for non-private runs).
"""

from __future__ import annotations

import numpy as np

CLIP_MODES = ("coordinate", "l2")


def clip_per_sample(grads: np.ndarray, G: float | None, mode: str = "coordinate") -> np.ndarray:
    """Clip each row of ``grads`` (shape ``(b, d)`` or ``(d,)``) and return a new array."""
    g = np.array(grads, dtype=np.float64, copy=True)
    if G is None:
        return g
    if mode == "coordinate":
        bound = G / np.sqrt(g.shape[-1])
        return np.clip(g, -bound, bound, out=g)
    if mode == "l2":
        norms = np.linalg.norm(g, axis=-1, keepdims=True)
        scale = np.minimum(1.0, G / np.maximum(norms, 1e-300))
        return g * scale
    raise ValueError(f"clip_mode must be one of {CLIP_MODES}, got clip_mode={mode!r}")
