"""FedExP server step (Jhunjhunwala, Wang, Joshi, ICLR 2023), a FedLi baseline (FedLi paper,
Section 7).

Paper form (uniform mean over the S participating clients, as in the FedExP paper)::

    eta_g = max(1, sum_i ||Delta_i||^2 / (2 S (||Dbar||^2 + eps)))     Dbar = (1/S) sum_i Delta_i
    w_{t+1} = w_t - eta_g * Dbar

Weighted form (the official code, ``p_i = n_i / sum_j n_j`` over the participants)::

    eta_g = max(1, 0.5 * sum_i p_i ||Delta_i||^2 / (||sum_i p_i Delta_i||^2 + eps))

With uniform ``p_i = 1/S`` the two agree. The official code also passes ``S * eps_t`` (with
``eps_t = eps * 0.998**(2t)``) as ``eps``; :class:`~flwr_strategies.fedli.server.FedExPServer` does
that scaling, these functions take the final value. ``Delta_i = w_t - w_i``. Norms run over the
concatenation of all floating arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..core.validation import check_range, require_finite
from .aggregation import is_float_array

__all__ = ["fedexp_server_step", "fedexp_step_size"]


def _check_weights(weights: Sequence[float], s: int) -> np.ndarray:
    p = np.asarray([float(w) for w in weights], dtype=np.float64)
    if p.size != s:
        raise ValueError(f"{s} client deltas but {p.size} weights")
    if not np.all(np.isfinite(p)) or np.any(p < 0) or not p.sum() > 0:
        raise ValueError(f"FedExP weights must be finite, >= 0 and not all 0, got {list(weights)}")
    return p / p.sum()


def fedexp_step_size(deltas: Sequence[np.ndarray], eps: float = 1e-3, weights: Sequence[float] | None = None) -> float:
    """The FedExP server step size from the flat client deltas ``Delta_i`` (float64 vectors).

    ``weights`` None: the paper's uniform form; otherwise ``p_i`` (normalised here). Always >= 1.
    All-zero deltas give 1 (no extrapolation, no division by zero even with eps = 0).
    """
    eps = check_range("eps", eps, 0.0)
    if len(deltas) == 0:
        raise ValueError("FedExP needs at least one client delta")
    d = [np.asarray(x, dtype=np.float64).ravel() for x in deltas]
    for i, x in enumerate(d):
        if not np.all(np.isfinite(x)):
            raise FloatingPointError(f"FedExP: client {i} sent a non-finite update")
    s = len(d)
    if weights is None:
        num = float(sum(float(np.dot(x, x)) for x in d))
        mean = np.mean(np.stack(d), axis=0)
        den = 2.0 * s * (float(np.dot(mean, mean)) + eps)
    else:
        p = _check_weights(weights, s)
        num = 0.5 * float(sum(pi * float(np.dot(x, x)) for pi, x in zip(p, d)))
        mean = np.sum(np.stack(d) * p[:, None], axis=0)
        den = float(np.dot(mean, mean)) + eps
    if num == 0.0 or den == 0.0:
        return 1.0
    return float(max(1.0, num / den))


def fedexp_server_step(
    global_arrays: Sequence[np.ndarray],
    client_models: Sequence[Sequence[np.ndarray]],
    eps: float = 1e-3,
    weights: Sequence[float] | None = None,
) -> tuple[list[np.ndarray], dict[str, float]]:
    """One FedExP round: returns the new arrays (input dtypes) and ``{"eta_g", "delta_norm"}``.

    ``weights`` None: uniform mean (the paper); otherwise ``p_i`` for the mean and the step size.
    Non-float arrays take the (weighted) mean of the client values, rounded. Works one array at a
    time (no model-sized stacks); the step size equals :func:`fedexp_step_size` on the flat deltas.
    """
    if len(client_models) == 0:
        raise ValueError("FedExP needs at least one client model")
    require_finite("global model", global_arrays)
    for i, m in enumerate(client_models):
        if len(m) != len(global_arrays):
            raise ValueError(f"client {i} sent {len(m)} arrays, expected {len(global_arrays)}")
        require_finite(f"client {i} model", m)
    s = len(client_models)
    p = np.full(s, 1.0 / s) if weights is None else _check_weights(weights, s)
    idx = [j for j, w in enumerate(global_arrays) if is_float_array(w)]
    # one array at a time: per-client ||Delta_i||^2 and the weighted mean Dbar (kept for the update)
    norms = np.zeros(s)
    dbar: dict[int, np.ndarray] = {}
    for j in idx:
        w = np.asarray(global_arrays[j], dtype=np.float64)
        acc = np.zeros_like(w)
        for i, m in enumerate(client_models):
            d = w - np.asarray(m[j], dtype=np.float64)
            norms[i] += float(np.vdot(d, d))
            acc += p[i] * d
        dbar[j] = acc
    dbar_sq = float(sum(float(np.vdot(v, v)) for v in dbar.values()))
    eps = check_range("eps", eps, 0.0)
    if not np.all(np.isfinite(norms)) or not math.isfinite(dbar_sq):
        raise FloatingPointError("FedExP: non-finite client update")
    num = 0.5 * float(np.dot(p, norms))
    den = dbar_sq + eps
    eta_g = 1.0 if num == 0.0 or den == 0.0 else float(max(1.0, num / den))
    out: list[np.ndarray] = []
    for j, ref in enumerate(global_arrays):
        ref = np.asarray(ref)
        if j in dbar:
            out.append((ref.astype(np.float64) - eta_g * dbar[j]).astype(ref.dtype))
        else:
            vals = [np.asarray(m[j], dtype=np.float64) for m in client_models]
            out.append(np.rint(np.sum([pi * v for pi, v in zip(p, vals)], axis=0)).astype(ref.dtype))
    return out, {"eta_g": eta_g, "delta_norm": float(np.sqrt(dbar_sq))}
