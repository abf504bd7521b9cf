"""Local rules of DFedCata and the decentralized baselines, as small torch pieces (no Flower).

The pieces work on the user's own ``nn.Module`` and training loop, in the style of ``torch.optim``
and ``torch.nn.utils.parametrize`` (their use: :mod:`flwr_strategies.clients.dfedcata`, which
re-exports them): :class:`MoreauEnvelope` (DFedCata's proximal term), :class:`LocalSGD` (the exact
local step of every method of the paper's comparison) and :class:`SAM` (sharpness-aware steps around
any optimizer). :func:`run_local` runs them over any iterable of ``(x, y)`` batches on the one local
loop (:func:`flwr_strategies.core.local.train_steps`); :func:`local_update` is the seeded in-memory
version. One run of either: DFedAvg / D-PSGD (``lam = momentum = rho = 0``), DFedCata (``lam > 0``),
DFedAvgM (``momentum > 0``), DFedSAM / FedSAM (``rho > 0``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

import torch

from ..core.local import Objective, batch_stream, train_steps
from ..core.validation import check_choice, check_number, check_range
from .config import CLIP_SCOPES

__all__ = [
    "MoreauEnvelope",
    "LocalSGD",
    "SAM",
    "run_local",
    "local_update",
    "CLIP_SCOPES",
]


def _trainable(model_or_params: torch.nn.Module | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    src = model_or_params.parameters() if isinstance(model_or_params, torch.nn.Module) else model_or_params
    params = [p for p in src if p.requires_grad]
    if not params:
        raise ValueError("no trainable parameters (requires_grad=True) were given")
    return params


def _global_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.sqrt(sum((t * t).sum() for t in tensors))


# ---------------------------------------------------------------------------------- pieces
class MoreauEnvelope:
    """DFedCata's Moreau-envelope term ``lam/2 ||x - x_0||^2`` on a model's trainable parameters.

    Paper: arXiv:2410.07272, Algorithm 1 line 6: each local step is
    ``x <- x - lr (g + lam (x - x_{i,0}))`` with ``x_{i,0}`` the round's (extrapolated) start point.

    Parameters
    ----------
    model : nn.Module | iterable of tensors
        The model (or its parameters) at the start point: the anchor ``x_0`` is a snapshot of its
        trainable parameters taken at construction (or at :meth:`reset`).
    lam : float
        Penalty, >= 0 (paper: 0.05; 0 makes every method of this class a no-op). Keep
        ``lr * lam < 1`` (the local contraction factor ``1 - lr lam`` must stay positive).

    Notes
    -----
    Use it either as a context manager around an unchanged training loop (gradient hooks add
    ``lam (x - x_0)`` to each ``p.grad`` after every ``backward()``; any optimizer), or add
    :meth:`penalty` to the loss. With gradient clipping inside the loop, the clip then bounds the
    data gradient *plus* the proximal gradient (:class:`LocalSGD` offers the other two orders).
    """

    def __init__(self, model: torch.nn.Module | Iterable[torch.Tensor], lam: float) -> None:
        self.lam = check_range("lam", lam, 0.0)
        self.params = _trainable(model)
        self.anchor: list[torch.Tensor] = []
        self._hooks: list[Any] = []
        self.reset()

    def reset(self) -> None:
        """Take the parameters' current values as the anchor ``x_0``."""
        self.anchor = [p.detach().clone() for p in self.params]

    def penalty(self) -> torch.Tensor:
        """``lam/2 ||x - x_0||^2`` as a differentiable scalar (add it to the loss)."""
        total = sum(((p - a) ** 2).sum() for p, a in zip(self.params, self.anchor))
        return 0.5 * self.lam * total

    def gradient(self, j: int, p: torch.Tensor) -> torch.Tensor:
        """``lam (p - a_j)`` for parameter ``j`` (no graph)."""
        return self.lam * (p.detach() - self.anchor[j])

    def __enter__(self) -> "MoreauEnvelope":
        if self.lam > 0 and not self._hooks:
            for p, a in zip(self.params, self.anchor):
                self._hooks.append(p.register_post_accumulate_grad_hook(self._hook(a)))
        return self

    def _hook(self, anchor: torch.Tensor):
        lam = self.lam

        def add_prox(p: torch.Tensor) -> None:
            with torch.no_grad():
                p.grad.add_(p.detach() - anchor, alpha=lam)

        return add_prox

    def __exit__(self, *exc: Any) -> None:
        self.detach()

    def attach(self) -> "MoreauEnvelope":
        """Register the gradient hooks now (as entering the context); returns ``self``. For a model
        built per round, ``MoreauEnvelope(model, lam).attach()`` is all a training handler needs."""
        return self.__enter__()

    def detach(self) -> None:
        """Remove the gradient hooks (as leaving the context)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []


class LocalSGD(torch.optim.Optimizer):
    """The local step of DFedCata and its decentralized baselines, as a ``torch.optim.Optimizer``.

    ``step()`` reads each parameter's ``.grad`` (the data gradient g of the minibatch) and applies

    - ``clip_scope="data"`` (default: clip the data gradient alone): ``d = clip(g) + wd x + lam (x - x_0)``;
    - ``clip_scope="official"`` (the official code): ``d = clip(g - lam x_0) + (lam + wd) x``;

    where ``clip`` rescales the global norm to ``clip_norm`` when it exceeds it and ``lam``, ``x_0``
    come from ``moreau``; then ``x <- x - lr d`` or, with ``momentum`` mu > 0, the heavy ball
    ``v <- mu v - lr d; x <- x + v`` (DFedAvgM; ``v`` starts at 0, so build one optimizer per round).

    Parameters
    ----------
    params : iterable of tensors
        Trainable parameters (in the order of ``moreau``'s parameters when given).
    lr : float
        Step size, > 0 (paper: 0.1 x 0.998 per round).
    momentum : float (default: 0.0)
        Heavy-ball coefficient, in [0, 1) (DFedAvgM: 0.9).
    weight_decay : float (default: 0.0)
        L2 coefficient, >= 0 (official code: 5e-4).
    clip_norm : float | None (default: None)
        Global gradient-norm bound, > 0, or None for no clipping (official code: 10).
    clip_scope : str (default: "data")
        ``"data"`` or ``"official"`` (see above).
    moreau : MoreauEnvelope | None (default: None)
        The proximal term (DFedCata); None for lam = 0.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        *,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        clip_norm: float | None = None,
        clip_scope: str = "data",
        moreau: MoreauEnvelope | None = None,
    ) -> None:
        lr = check_range("lr", lr, 0.0, low_open=True)
        momentum = check_range("momentum", momentum, 0.0, 1.0, high_open=True)
        weight_decay = check_range("weight_decay", weight_decay, 0.0)
        if clip_norm is not None and not (check_number("clip_norm", clip_norm, "a finite number") > 0):
            raise ValueError(f"clip_norm must be > 0 or None, got {clip_norm!r}")
        check_choice("clip_scope", clip_scope, CLIP_SCOPES)
        params = list(params)
        lam = 0.0 if moreau is None else moreau.lam
        if lam > 0 and lr * lam >= 1.0:
            raise ValueError(f"lr * lam must be < 1, got lr={lr!r}, lam={lam!r}")
        if moreau is not None and [id(p) for p in moreau.params] != [id(p) for p in params]:
            raise ValueError("moreau must be built on the same parameters, in the same order")
        super().__init__(params, {"lr": lr})
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        self.clip_scope = clip_scope
        self.moreau = moreau if (moreau is not None and moreau.lam > 0) else None
        self._bufs: list[torch.Tensor] | None = None

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def _clipped(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        if self.clip_norm is None:
            return grads
        gnorm = _global_norm(grads)
        if gnorm > self.clip_norm:
            return [g * (self.clip_norm / (gnorm + 1e-6)) for g in grads]
        return grads

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # noqa: D102
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = self._params()
        lr = float(self.param_groups[0]["lr"])
        grads = [torch.zeros_like(p) if p.grad is None else p.grad.detach() for p in params]
        mo = self.moreau
        if self.clip_scope == "official":
            lam = mo.lam if mo is not None else 0.0
            if mo is not None:
                grads = [g - lam * a for g, a in zip(grads, mo.anchor)]
            grads = self._clipped(grads)
            decay = lam + self.weight_decay
            dirs = [g + decay * p if decay else g for g, p in zip(grads, params)]
        else:
            grads = self._clipped(grads)
            dirs = []
            for j, (p, g) in enumerate(zip(params, grads)):
                d = g
                if self.weight_decay:
                    d = d + self.weight_decay * p
                if mo is not None:
                    d = d + mo.lam * (p - mo.anchor[j])
                dirs.append(d)
        if self.momentum > 0:
            if self._bufs is None:
                self._bufs = [torch.zeros_like(p) for p in params]
            for p, d, v in zip(params, dirs, self._bufs):
                v.mul_(self.momentum).sub_(lr * d)
                p.add_(v)
        else:
            for p, d in zip(params, dirs):
                p.sub_(lr * d)
        return loss


class SAM:
    """Sharpness-aware minimisation (Foret et al., ICLR 2021) around any optimizer: DFedSAM's and
    FedSAM's local step (radius ``rho``, paper 0.1).

    After the user's ``loss.backward()`` (gradient g at x), ``step(closure)`` moves the parameters to
    ``x + e`` with ``e = rho g / (||g|| + 1e-12)``, calls ``closure()`` (which must zero the
    gradients, recompute the loss on the *same* minibatch and call ``backward()``), moves back to x
    and lets ``optimizer`` step with the gradient taken at ``x + e``.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        The optimizer that takes the step (its parameters are perturbed).
    rho : float
        Perturbation radius, >= 0 (0: the optimizer's plain step, no second gradient).
    """

    #: How :func:`~flwr_strategies.core.local.train_steps` steps this piece: after the first
    #: ``backward()``, ``step(closure)`` with a closure that recomputes loss and gradients.
    closure = "gradient"

    def __init__(self, optimizer: torch.optim.Optimizer, rho: float) -> None:
        self.optimizer = optimizer
        self.rho = check_range("rho", rho, 0.0)

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], Any]) -> Any:
        """One SAM step (see the class docstring); returns ``closure()``'s value."""
        if self.rho == 0:
            self.optimizer.step()
            return None
        params = [p for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
        with torch.no_grad():
            grads = [p.grad.detach() for p in params]
            scale = self.rho / (_global_norm(grads) + 1e-12)
            eps = [g * scale for g in grads]
            for p, e in zip(params, eps):
                p.add_(e)
        with torch.enable_grad():
            loss = closure()
        with torch.no_grad():
            for p, e in zip(params, eps):
                p.sub_(e)
        self.optimizer.step()
        return loss


# ---------------------------------------------------------------------------------- loops
def run_local(model: torch.nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *, lr: float,
              lam: float = 0.0, momentum: float = 0.0, rho: float = 0.0, weight_decay: float = 0.0,
              clip_norm: float | None = None, clip_scope: str = "data", loss_fn: Objective | None = None) -> dict[str, float]:
    """Run the local rule in place on ``model`` over ``batches``; its current weights are the
    start point and the proximal anchor. Built from :class:`MoreauEnvelope`, :class:`LocalSGD` and
    :class:`SAM`. ``loss_fn(model, x, y)`` defaults to the cross-entropy of ``model(x)``. Returns
    ``{"train_loss": mean minibatch loss (at x, before the step), "steps": number of steps}``."""
    lam = check_range("lam", lam, 0.0)
    params = _trainable(model)
    moreau = MoreauEnvelope(params, lam) if lam > 0 else None
    opt = LocalSGD(params, lr, momentum=momentum, weight_decay=weight_decay, clip_norm=clip_norm,
                   clip_scope=clip_scope, moreau=moreau)
    sam = SAM(opt, rho)
    return train_steps(model, batches, sam if sam.rho > 0 else opt, objective=loss_fn)


def local_update(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, lr: float, batch_size: int,
                 generator: torch.Generator, epochs: int | None = None, steps: int | None = None, lam: float = 0.0,
                 momentum: float = 0.0, rho: float = 0.0, weight_decay: float = 0.0, clip_norm: float | None = None,
                 clip_scope: str = "data", loss_fn: Objective | None = None,
                 augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None) -> dict[str, float]:
    """:func:`run_local` on in-memory tensors ``x``, ``y`` with seeded minibatches (``epochs``
    passes or ``steps`` batches of ``batch_size``; order and ``augment(xb, generator)`` from
    ``generator``). The arguments are checked by :func:`run_local` before any step."""
    if (epochs is None) == (steps is None):
        raise ValueError(f"set exactly one of epochs/steps, got epochs={epochs!r}, steps={steps!r}")
    data = SimpleNamespace(x=x, y=y, augment=augment)
    batches = batch_stream(data, batch_size=batch_size, generator=generator, epochs=epochs, steps=steps)
    return run_local(model, batches, lr=lr, lam=lam, momentum=momentum, rho=rho, weight_decay=weight_decay,
                     clip_norm=clip_norm, clip_scope=clip_scope, loss_fn=loss_fn)
