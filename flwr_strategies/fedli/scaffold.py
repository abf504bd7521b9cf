"""SCAFFOLD, option II (Karimireddy et al., ICML 2020, Algorithm 1), a FedLi baseline.

Client (starting from ``w_t``, with global control ``c`` and its own control ``c_i``)::

    K steps of  w <- w - eta_l * (g_i(w) - c_i + c)
    c_i+ = c_i - c + (w_t - w_i) / (K * eta_l)                    # option II
    send  w_i  and  dc_i = c_i+ - c_i

With plain SGD, option II's ``c_i+`` is the mean of the K minibatch gradients ``g_i`` the client
computed. Under any other optimizer (momentum, Adam, a schedule) ``(w_t - w_i) / (K eta_l)`` is not:
heavy-ball momentum 0.9 inflates it about tenfold, and the next round's correction feeds that back
until the controls overflow. :class:`ScaffoldCorrection` therefore sums the gradients it corrects and
uses their mean for ``c_i+`` whenever the steps it observed were not plain SGD at ``eta_l``.

Server (S sampled clients out of N, uniform means)::

    w_{t+1} = w_t + eta_g * mean_i(w_i - w_t)
    c      <- c + (S / N) * mean_i(dc_i)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from ..core.aggregation import fedavg_average
from ..core.local import criterion, train_steps, watch_steps
from ..core.validation import all_finite, check_range, require_finite
from .server_ls import gd_server_step

#: The largest heavy-ball SGD step ``lr / (1 - momentum)`` (momentum > 0) measured to learn as FedAvg does
#: with the correction: on Flower's quickstart-pytorch CNN (4 nodes, 5 rounds of 2 epochs, three
#: initial models) momentum 0.9 at lr 0.02 ended at 0.87-0.94 like FedAvg (0.91-0.95), at lr 0.05 two
#: of three runs lost their accuracy in the last round (0.87 to 0.48, 0.75 to 0.62; FedAvg 0.94-0.95).
SCAFFOLD_MAX_MOMENTUM_STEP = 0.2

__all__ = ["ScaffoldCorrection", "SCAFFOLD_MAX_MOMENTUM_STEP", "scaffold_client_control_from_gradients", "scaffold_client_control_update",
           "scaffold_local_sgd", "scaffold_server_update"]


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

    Notes
    -----
    Frozen parameters (``requires_grad=False``) are not corrected. Where you clip gradients decides
    the scope: :meth:`apply` after ``clip_grad_norm_`` clips ``g`` alone (this library's default);
    before it clips ``g - c_i + c`` (the FedExP/FedSLS code, ``correction_in_clip``).

    Any optimizer works. While it lives, the correction watches every ``torch.optim`` step that
    touches its parameters (:func:`~flwr_strategies.core.local.watch_steps`, until
    :meth:`control_update`). When every observed step was ``torch.optim.SGD`` without momentum at the
    learning rate given to :meth:`control_update` (or no optimizer step was observed), ``c_i+`` is
    option II's ``c_i - c + (w_t - w)/(K lr)``; otherwise (momentum, Nesterov, Adam, another lr) it is
    the mean of the minibatch gradients :meth:`apply` saw, which option II equals under plain SGD and
    which stays the gradient mean under any optimizer. :attr:`rule` tells which one was used.

    SGD with momentum is refused at its first step when its step ``lr / (1 - momentum)`` exceeds
    :data:`SCAFFOLD_MAX_MOMENTUM_STEP` (measured; the paper's clients run plain SGD, which is never
    refused): the correction's drift grows with the step, and larger momentum steps lost accuracy.
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
        require_finite("SCAFFOLD global control", self.c_global)
        require_finite("SCAFFOLD client control", self.c_local)
        self.start = [p.detach().cpu().numpy().copy() for p in params]
        self.diff = [
            torch.as_tensor(cg, device=p.device).to(p.dtype) - torch.as_tensor(cl, device=p.device).to(p.dtype)
            for p, cg, cl in zip(params, self.c_global, self.c_local)
        ]
        self.grad_sum = [torch.zeros(p.shape, dtype=torch.float64, device=p.device) for p in params]
        self.steps = 0
        self.rule: str | None = None
        self._observed: list[tuple[bool, float]] = []  # (plain SGD step?, its lr) per optimizer step
        self._optimizer = ""  # the last observed optimizer and its settings, for error messages
        self._mine = {id(p) for p in params}
        self._watch = watch_steps(self, before="_observe")

    @torch.no_grad()
    def apply(self) -> None:
        """Add ``c - c_i`` to every trainable parameter's gradient (a missing gradient counts as 0),
        after adding the gradient itself to the running sum."""
        for j, p in enumerate(self.params):
            if not p.requires_grad:
                continue
            if self.diff[j].device != p.device:  # the model was moved (model.to(device)) after construction
                self.diff[j], self.grad_sum[j] = self.diff[j].to(p.device), self.grad_sum[j].to(p.device)
            d = self.diff[j]
            if p.grad is None:
                p.grad = d.clone()
            else:
                self.grad_sum[j].add_(p.grad)
                p.grad.add_(d)
        self.steps += 1

    def _observe(self, optimizer: torch.optim.Optimizer) -> None:
        for group in optimizer.param_groups:
            if any(id(p) in self._mine for p in group["params"]):
                momentum = float(group.get("momentum", 0) or 0) if isinstance(optimizer, torch.optim.SGD) else 0.0
                if momentum > 0 and not self._observed:
                    step = float(group["lr"]) / (1.0 - momentum)
                    if step > SCAFFOLD_MAX_MOMENTUM_STEP * (1 + 1e-9):
                        raise ValueError(
                            f"SCAFFOLD refuses SGD(lr={group['lr']!r}, momentum={momentum!r}): its step lr / (1 - momentum)"
                            f" = {step:.3g} exceeds {SCAFFOLD_MAX_MOMENTUM_STEP}. The control-variate correction c - c_i "
                            "is added to every gradient, and with large momentum steps the local models drift from "
                            "where the controls were estimated: on Flower's quickstart CNN, momentum 0.9 at lr 0.02 "
                            "learned as FedAvg did, at lr 0.05 two of three runs lost their accuracy in round 5. Use "
                            f"lr <= {SCAFFOLD_MAX_MOMENTUM_STEP * 0.1:.2g} with momentum 0.9, or plain SGD (the paper's "
                            "client, never refused).")
                plain = type(optimizer) is torch.optim.SGD and not group.get("momentum", 0) \
                    and not group.get("maximize", False)
                self._observed.append((plain, float(group["lr"])))
                keys = [k for k in ("lr", "momentum", "betas", "weight_decay") if k in group]
                self._optimizer = f"{type(optimizer).__name__}(" + ", ".join(f"{k}={group[k]!r}" for k in keys) + ")"

    def control_update(self, lr: float, steps: int | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """``(c_i+, dc_i)`` (NumPy arrays in ``parameters()`` order), ``K`` = ``steps`` (default: the
        number of :meth:`apply` calls): option II's ``c_i+ = c_i - c + (w_t - w)/(K lr)`` after plain
        SGD at ``lr``, else the mean of the raw minibatch gradients (see the class docstring).
        Stops watching the optimizer."""
        k = self.steps if steps is None else int(steps)
        self._watch.remove()
        plain = all(ok and rate == float(lr) for ok, rate in self._observed)
        self.rule = "trajectory" if plain else "gradients"
        try:
            if plain:
                w_now = [p.detach().cpu().numpy() for p in self.params]
                return scaffold_client_control_update(self.c_local, self.c_global, self.start, w_now, k, lr)
            if k != self.steps:
                raise ValueError(f"SCAFFOLD: {k} local steps were reported but the correction saw {self.steps}; "
                                 "call apply() once per step")
            means = [(acc / max(k, 1)).cpu().numpy() for acc in self.grad_sum]
            return scaffold_client_control_from_gradients(self.c_local, means, k)
        except FloatingPointError as err:
            seen = f" under {self._optimizer}" if self._optimizer else f" at lr={lr!r}"
            raise FloatingPointError(
                f"{err}: the {k} local steps{seen} diverged (the model or its gradients overflowed); lower the "
                "learning rate (SCAFFOLD adds c - c_i to every gradient, so it tolerates a smaller step than "
                "FedAvg: see 'Your optimizer and learning rate' in docs/switch.md)") from None


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
    minibatches, on the one local loop (:func:`~flwr_strategies.core.local.train_steps`); controls
    align with ``model.parameters()``.

    Gradient clipping (if any) applies to the raw minibatch gradient before the correction, or to the
    corrected one with ``correction_in_clip``. Returns ``{"train_loss": mean minibatch loss, "steps":
    K}``. Raises ``FloatingPointError`` on a non-finite minibatch loss.
    """
    check_range("lr", lr, 0.0, low_open=True)
    corr = ScaffoldCorrection(model, c_global, c_local)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    hooks: list[Callable[[], None]] = [corr.apply] if correction_in_clip else []
    if grad_clip is not None:
        hooks.append(lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip))
    if not correction_in_clip:
        hooks.append(corr.apply)
    return train_steps(model, batches, opt, objective=criterion(loss_fn), after_backward=hooks,
                       check_finite="SCAFFOLD client")


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
    check_range("lr", lr, 0.0, low_open=True)
    scale = 1.0 / (max(steps, 1) * lr)
    targets = (np.asarray(ci, np.float64) - np.asarray(c, np.float64)
               + (np.asarray(wt, np.float64) - np.asarray(wi, np.float64)) * scale
               for ci, c, wt, wi in zip(c_local, c_global, w_global, w_local))
    return scaffold_client_control_from_gradients(c_local, targets, steps)


def scaffold_client_control_from_gradients(
    c_local: Sequence[np.ndarray], mean_gradients: Sequence[np.ndarray], steps: int,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``c_i+`` = the mean of the K minibatch gradients of the local run (option II's value under
    plain SGD, for any optimizer). Returns ``(c_i+, dc_i = c_i+ - c_i)`` in the dtypes of ``c_local``,
    with ``c_i+ := c_i + dc_i`` in the array dtype, so a server that mirrors ``c_i`` by adding the
    reported ``dc_i`` holds exactly the client's values; with ``steps == 0`` the control is unchanged."""
    if steps < 0:
        raise ValueError(f"number of local steps must be >= 0, got {steps}")
    if steps == 0:
        return [np.array(c, copy=True) for c in c_local], [np.zeros_like(c) for c in c_local]
    new, diff = [], []
    for ci, g in zip(c_local, mean_gradients):
        ci64 = np.asarray(ci, dtype=np.float64)
        dtype = np.asarray(ci).dtype
        d = (np.asarray(g, np.float64) - ci64).astype(dtype)
        diff.append(d)
        new.append((ci64 + d.astype(np.float64)).astype(dtype))
    require_finite("SCAFFOLD client control variate", new)
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
    check_range("eta_g", eta_g, 0.0, low_open=True)
    if num_examples is None:
        counts = [1] * s
    else:
        counts = [int(n) for n in num_examples]
        if len(counts) != s or any(n < 0 for n in counts) or sum(counts) == 0:
            raise ValueError(f"num_examples must hold {s} counts >= 0, not all 0, got {list(num_examples)}")
        if total_examples is None or int(total_examples) < sum(counts):
            raise ValueError(f"total_examples ({total_examples}) must be >= the participants' {sum(counts)} examples")
    # A NaN or an infinity in any reply reaches both sums (p x and + propagate them; 0 x inf is NaN, which
    # NumPy would warn of before the error below), so the replies are searched, to name the first bad
    # one, only when a sum is not finite: one pass over the two results instead of one over every reply
    with np.errstate(invalid="ignore"):
        avg = fedavg_average(client_models, counts)
        new_c = _control_step(c_global, client_dcs, s / float(num_clients), counts if num_examples is not None
                              else None, total_examples)
    if not all(all_finite(a) for a in (*avg, *new_c)):
        for i, (m, dc) in enumerate(zip(client_models, client_dcs)):
            require_finite(f"client {i} model", m)
            require_finite(f"client {i} control update", dc)
    # w + eta_g (a - w) is w - eta_g (w - a) exactly (negation is exact): FedLi-LS's server step
    new_w = avg if eta_g == 1.0 else gd_server_step(global_arrays, avg, eta_g)
    return new_w, new_c


def _control_step(c_global: Sequence[np.ndarray], client_dcs: Sequence[Sequence[np.ndarray]], share: float,
                  counts: Sequence[int] | None, total_examples: int | None) -> list[np.ndarray]:
    """``c + (S/N) mean_i(dc_i)`` (``counts`` None) or ``c + sum_i (n_i / total_examples) dc_i``, one array
    at a time in float64, streaming: the control updates are added into one float64 accumulator in
    client order (the sum ``np.mean(np.stack(...), axis=0)`` forms, without the stack of S copies), so
    the step holds the accumulator and one product, not a float64 copy of every reply."""
    s = len(client_dcs)
    out = []
    for j, c in enumerate(c_global):
        acc = np.zeros(np.shape(c), np.float64)
        scratch = np.empty_like(acc) if counts is not None else None
        for i, dc in enumerate(client_dcs):
            if counts is None:
                np.add(acc, dc[j], out=acc, dtype=np.float64)
            else:
                np.multiply(dc[j], counts[i] / float(total_examples), out=scratch, dtype=np.float64)
                np.add(acc, scratch, out=acc)
        if counts is None:
            np.divide(acc, s, out=acc)
            np.multiply(acc, share, out=acc)
        np.add(acc, c, out=acc, dtype=np.float64)
        out.append(acc.astype(np.asarray(c).dtype, copy=False))
    return out
