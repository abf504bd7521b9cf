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

from ..core.aggregation import fedavg_average
from .aggregation import check_finite_arrays, is_float_array

__all__ = ["ScaffoldCorrection", "scaffold_client_control_update", "scaffold_local_sgd", "scaffold_server_update"]


class ScaffoldCorrection:
    """SCAFFOLD's control-variate correction, for your own training loop (the client piece).

    Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning", ICML
    2020, option II. Built at the start of a local run (it records the starting weights ``w_t``);
    :meth:`apply` after every ``backward()`` turns the minibatch gradient ``g`` into
    ``g - c_i + c``; :meth:`control_update` gives ``c_i+`` and ``dc_i`` at the end::

        corr = ScaffoldCorrection(model, c_global, c_local)   # controls in model.parameters() order
        for x, y in loader:
            opt.zero_grad(); loss_fn(model(x), y).backward()
            corr.apply()                                      # g <- g - c_i + c
            opt.step()
        c_new, dc = corr.control_update(lr)                   # option II: c_i - c + (w_t - w)/(K lr)

    Parameters
    ----------
    model : torch.nn.Module | iterable of torch.Tensor
        The model (or its parameters) being trained; controls align with ``parameters()``.
    c_global : sequence of arrays or tensors
        The server control ``c``, one entry per parameter (shapes must match).
    c_local : sequence of arrays or tensors | None (default: None, i.e. zeros)
        This client's control ``c_i`` (kept across rounds by the client, e.g. in ``context.state``).

    Frozen parameters (``requires_grad=False``) are not corrected. Where you clip gradients decides
    the scope: :meth:`apply` after ``clip_grad_norm_`` clips ``g`` alone (this library's default);
    before it clips ``g - c_i + c`` (the FedExP/FedSLS code, ``correction_in_clip``).
    """

    def __init__(self, model, c_global: Sequence, c_local: Sequence | None = None) -> None:
        params = list(model.parameters()) if isinstance(model, torch.nn.Module) else list(model)
        if c_local is None:
            c_local = [np.zeros(tuple(p.shape)) for p in params]
        if len(params) != len(c_global) or len(params) != len(c_local):
            raise ValueError(
                f"control variates do not match the model: {len(params)} parameters, "
                f"{len(c_global)} global and {len(c_local)} local controls"
            )
        self.params = params
        self.c_global = [_as_numpy(c) for c in c_global]
        self.c_local = [_as_numpy(c) for c in c_local]
        for j, (p, cg, cl) in enumerate(zip(params, self.c_global, self.c_local)):
            if tuple(cg.shape) != tuple(p.shape) or tuple(cl.shape) != tuple(p.shape):
                raise ValueError(f"control {j} has shapes {cg.shape} / {cl.shape}, parameter has {tuple(p.shape)}")
        check_finite_arrays(self.c_global, "SCAFFOLD global control")
        check_finite_arrays(self.c_local, "SCAFFOLD client control")
        self.start = [p.detach().cpu().numpy().copy() for p in params]
        self.diff = [
            torch.as_tensor(cg, device=p.device).to(p.dtype) - torch.as_tensor(cl, device=p.device).to(p.dtype)
            for p, cg, cl in zip(params, self.c_global, self.c_local)
        ]
        self.steps = 0

    @torch.no_grad()
    def apply(self) -> None:
        """Add ``c - c_i`` to every trainable parameter's gradient (a missing gradient counts as 0)."""
        for p, d in zip(self.params, self.diff):
            if not p.requires_grad:
                continue
            if p.grad is None:
                p.grad = d.clone()
            else:
                p.grad.add_(d)
        self.steps += 1

    def control_update(self, lr: float, steps: int | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Option II: ``(c_i+, dc_i)`` with ``c_i+ = c_i - c + (w_t - w)/(K lr)``, ``K`` = ``steps``
        (default: the number of :meth:`apply` calls). NumPy arrays in ``parameters()`` order."""
        k = self.steps if steps is None else int(steps)
        w_now = [p.detach().cpu().numpy() for p in self.params]
        return scaffold_client_control_update(self.c_local, self.c_global, self.start, w_now, k, lr)


def _as_numpy(c) -> np.ndarray:
    if isinstance(c, torch.Tensor):
        return c.detach().cpu().numpy()
    return np.asarray(c)


def scaffold_local_sgd(
    model: torch.nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
    c_global: Sequence[torch.Tensor],
    c_local: Sequence[torch.Tensor],
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    grad_clip: float | None = None,
    correction_in_clip: bool = False,
) -> dict[str, float | int]:
    """Corrected local SGD (``torch.optim.SGD`` + :class:`ScaffoldCorrection`) over ``(inputs, labels)``
    minibatches; controls align with ``model.parameters()``.

    Gradient clipping (if any) applies to the raw minibatch gradient before the correction, or to the
    corrected one with ``correction_in_clip``. Returns ``{"train_loss": mean minibatch loss, "steps":
    K}``. Raises ``FloatingPointError`` on a non-finite minibatch loss.
    """
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"SCAFFOLD local learning rate must be finite and > 0, got {lr!r}")
    corr = ScaffoldCorrection(model, c_global, c_local)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    model.train()
    losses: list[float] = []
    for xb, yb in batches:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        val = float(loss.detach())
        if not math.isfinite(val):
            raise FloatingPointError(f"SCAFFOLD client: non-finite minibatch loss at local step {len(losses) + 1}")
        loss.backward()
        if correction_in_clip:
            corr.apply()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        if not correction_in_clip:
            corr.apply()
        opt.step()
        losses.append(val)
    for p in model.parameters():
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
    *,
    num_examples: Sequence[int] | None = None,
    total_examples: int | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Server step: returns ``(w_{t+1}, c_new)``.

    Paper (``num_examples`` None): ``w_{t+1} = w_t + eta_g mean_i(w_i - w_t)`` and
    ``c <- c + (S/N) mean_i(dc_i)``. Weighted (the FedExP/FedSLS code): the mean of the models is
    weighted by ``n_i / sum_S n_j`` and ``c <- c + sum_i (n_i / total_examples) dc_i``, i.e.
    ``c = sum_all (n_i / n) c_i`` over all N clients. With ``eta_g == 1`` the model is the (weighted)
    average of the client models, computed with FedAvg's arithmetic
    (:func:`~flwr_strategies.core.aggregation.fedavg_average`).
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
    if num_examples is None:
        counts = [1] * s
    else:
        counts = [int(n) for n in num_examples]
        if len(counts) != s or any(n < 0 for n in counts) or sum(counts) == 0:
            raise ValueError(f"num_examples must hold {s} counts >= 0, not all 0, got {list(num_examples)}")
        if total_examples is None or int(total_examples) < sum(counts):
            raise ValueError(f"total_examples ({total_examples}) must be >= the participants' {sum(counts)} examples")
    avg = fedavg_average(client_models, counts)
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
    new_c = []
    for j, c in enumerate(c_global):
        if num_examples is None:
            step = (s / float(num_clients)) * np.mean([np.asarray(dc[j], np.float64) for dc in client_dcs], axis=0)
        else:
            step = sum((n / float(total_examples)) * np.asarray(dc[j], np.float64) for n, dc in zip(counts, client_dcs))
        new_c.append((np.asarray(c, np.float64) + step).astype(np.asarray(c).dtype))
    return new_w, new_c
