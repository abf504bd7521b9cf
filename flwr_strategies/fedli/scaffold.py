"""SCAFFOLD, option II (Karimireddy et al., ICML 2020), a FedLi baseline (spec §6, §10 A18).

Client (starting from ``w_t``, with global control ``c`` and its own control ``c_i``)::

    K steps of  w <- w - eta_l * (g_i(w) - c_i + c)
    c_i+ = c_i - c + (w_t - w_i) / (K * eta_l)                    # option II
    send  w_i  and  dc_i = c_i+ - c_i

Server (S sampled clients out of N, uniform means)::

    w_{t+1} = w_t + eta_g * mean_i(w_i - w_t)
    c      <- c + (S / N) * mean_i(dc_i)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .aggregation import check_finite_arrays, is_float_array, weighted_average

__all__ = ["scaffold_client_control_update", "scaffold_local_sgd", "scaffold_server_update"]


def scaffold_local_sgd(
    model: torch.nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
    c_global: Sequence[torch.Tensor],
    c_local: Sequence[torch.Tensor],
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
    weight_decay: float = 0.0,
    grad_clip: float | None = None,
) -> dict[str, float | int]:
    """Corrected local SGD over ``(inputs, labels)`` minibatches; controls align with ``model.parameters()``.

    Gradient clipping (if any) applies to the raw minibatch gradient before the correction.
    Returns ``{"train_loss": mean minibatch loss, "steps": K}``. Raises ``FloatingPointError`` on a
    non-finite minibatch loss.
    """
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"SCAFFOLD local learning rate must be finite and > 0, got {lr!r}")
    params = list(model.parameters())
    if len(params) != len(c_global) or len(params) != len(c_local):
        raise ValueError(
            f"control variates do not match the model: {len(params)} parameters, "
            f"{len(c_global)} global and {len(c_local)} local controls"
        )
    corr = [(cg - cl).to(p.dtype) for p, cg, cl in zip(params, c_global, c_local)]
    model.train()
    losses: list[float] = []
    for xb, yb in batches:
        for p in params:
            p.grad = None
        loss = loss_fn(model(xb), yb)
        val = float(loss.detach())
        if not math.isfinite(val):
            raise FloatingPointError(f"SCAFFOLD client: non-finite minibatch loss at local step {len(losses) + 1}")
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        with torch.no_grad():
            for p, d in zip(params, corr):
                g = p.grad if p.grad is not None else torch.zeros_like(p)
                if weight_decay:
                    g = g + weight_decay * p
                p.add_(g + d, alpha=-lr)
        losses.append(val)
    for p in params:
        p.grad = None
    return {"train_loss": float(np.mean(losses)) if losses else 0.0, "steps": len(losses)}


def scaffold_client_control_update(
    c_local: Sequence[np.ndarray],
    c_global: Sequence[np.ndarray],
    w_global: Sequence[np.ndarray],
    w_local: Sequence[np.ndarray],
    steps: int,
    lr: float,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Option II: ``c_i+ = c_i - c + (w_t - w_i)/(K lr)``. Returns ``(c_i+, dc_i = c_i+ - c_i)``.

    With ``steps == 0`` (no local data) the control is left unchanged and ``dc_i = 0``.
    """
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"SCAFFOLD local learning rate must be finite and > 0, got {lr!r}")
    if steps < 0:
        raise ValueError(f"number of local steps must be >= 0, got {steps}")
    if steps == 0:
        return [np.array(c, copy=True) for c in c_local], [np.zeros_like(c) for c in c_local]
    scale = 1.0 / (steps * lr)
    new, diff = [], []
    for ci, c, wt, wi in zip(c_local, c_global, w_global, w_local):
        ci64 = np.asarray(ci, dtype=np.float64)
        val = ci64 - np.asarray(c, np.float64) + (np.asarray(wt, np.float64) - np.asarray(wi, np.float64)) * scale
        dtype = np.asarray(ci).dtype
        d = (val - ci64).astype(dtype)
        diff.append(d)
        # c_i+ := c_i + dc_i in the array dtype, so a server that mirrors c_i by adding the reported
        # dc_i holds exactly the same values as the client
        new.append((ci64 + d.astype(np.float64)).astype(dtype))
    check_finite_arrays(new, "SCAFFOLD client control variate")
    return new, diff


def scaffold_server_update(
    global_arrays: Sequence[np.ndarray],
    c_global: Sequence[np.ndarray],
    client_models: Sequence[Sequence[np.ndarray]],
    client_dcs: Sequence[Sequence[np.ndarray]],
    num_clients: int,
    eta_g: float = 1.0,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Server step: returns ``(w_{t+1}, c_new)``.

    With ``eta_g == 1`` the model is the uniform average of the client models, computed with the same
    arithmetic as FedAvg's aggregate (so it equals FedAvg's when all ``n_i`` are equal).
    """
    s = len(client_models)
    if s == 0:
        raise ValueError("SCAFFOLD needs at least one client result")
    if len(client_dcs) != s:
        raise ValueError(f"{s} client models but {len(client_dcs)} control updates")
    if num_clients < s:
        raise ValueError(f"num_clients ({num_clients}) is smaller than the number of results ({s})")
    if not (math.isfinite(eta_g) and eta_g > 0):
        raise ValueError(f"SCAFFOLD server step `eta_g` must be finite and > 0, got {eta_g!r}")
    for i, (m, dc) in enumerate(zip(client_models, client_dcs)):
        check_finite_arrays(m, f"client {i} model")
        check_finite_arrays(dc, f"client {i} control update")
    avg = weighted_average(client_models, [1.0 / s] * s)
    if eta_g == 1.0:
        new_w = avg
    else:
        new_w = []
        for w, a in zip(global_arrays, avg):
            if is_float_array(w):
                w64 = np.asarray(w, np.float64)
                new_w.append((w64 + eta_g * (np.asarray(a, np.float64) - w64)).astype(np.asarray(w).dtype))
            else:
                new_w.append(np.array(a, copy=True))
    frac = s / float(num_clients)
    new_c = []
    for j, c in enumerate(c_global):
        mean_dc = np.mean([np.asarray(dc[j], np.float64) for dc in client_dcs], axis=0)
        new_c.append((np.asarray(c, np.float64) + frac * mean_dc).astype(np.asarray(c).dtype))
    return new_w, new_c
