"""Local solvers of DFedCata and the decentralized baselines (torch).

One function, :func:`local_update`, covers every local rule of the paper's comparison;
the round's start point is both the initial iterate and the proximal anchor:

- DFedAvg / D-PSGD: plain SGD (``lam=0, momentum=0, rho=0``).
- DFedCata: Moreau-envelope (proximal) SGD, ``x <- x - lr (g + lam (x - x_0))``, with ``x_0`` the
  (extrapolated) start point; for ``lam = 0`` the prox term is skipped (bit-identical to SGD).
- DFedAvgM: heavy-ball SGD ``y_{k+1} = y_k - lr d_k + momentum (y_k - y_{k-1})``, reset each round.
- DFedSAM / FedSAM: SAM steps with radius ``rho``: ``e = rho g/||g||``, gradient taken at ``x + e``
  on the same minibatch.

Optional ``weight_decay`` (``+ wd x``) and ``clip_norm`` (global-norm clip of the *data*
gradient; the prox gradient is added after clipping, spec A4).

The minibatch order (and the optional per-batch ``augment(xb, generator)``) comes only from
the given ``torch.Generator``.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch
import torch.nn.functional as F

__all__ = ["local_update", "batch_indices", "LossFn"]

LossFn = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def _ce(model: torch.nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(xb), yb)


def batch_indices(
    n: int, batch_size: int, generator: torch.Generator, *, epochs: int | None = None, steps: int | None = None
) -> Iterator[torch.Tensor]:
    """Shuffled minibatch index tensors: ``epochs`` full passes or exactly ``steps`` batches
    (reshuffling after each pass). Exactly one of ``epochs``/``steps`` must be set."""
    if (epochs is None) == (steps is None):
        raise ValueError(f"set exactly one of epochs/steps, got epochs={epochs!r}, steps={steps!r}")
    if n <= 0:
        raise ValueError("client has no training data")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    done, passes = 0, 0
    while True:
        if epochs is not None and passes >= epochs:
            return
        perm = torch.randperm(n, generator=generator)
        passes += 1
        for s in range(0, n, batch_size):
            if steps is not None and done >= steps:
                return
            yield perm[s : s + batch_size]
            done += 1


def local_update(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    lr: float,
    batch_size: int,
    generator: torch.Generator,
    epochs: int | None = None,
    steps: int | None = None,
    lam: float = 0.0,
    momentum: float = 0.0,
    rho: float = 0.0,
    weight_decay: float = 0.0,
    clip_norm: float | None = None,
    loss_fn: LossFn | None = None,
    augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
) -> dict[str, float]:
    """Run the local rule in place on ``model`` (its current weights are x_0 / the anchor).

    Returns ``{"train_loss": mean minibatch loss, "steps": number of steps}``.
    """
    if lr <= 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    if lam < 0 or lr * lam >= 1:
        raise ValueError(f"need lam >= 0 and lr*lam < 1, got lam={lam!r}, lr={lr!r}")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    if rho < 0:
        raise ValueError(f"rho must be >= 0, got {rho!r}")
    if clip_norm is not None and clip_norm <= 0:
        raise ValueError(f"clip_norm must be > 0 or None, got {clip_norm!r}")
    loss_fn = loss_fn or _ce
    params = [p for p in model.parameters() if p.requires_grad]
    anchor = [p.detach().clone() for p in params] if lam > 0 else None
    bufs = [torch.zeros_like(p) for p in params] if momentum > 0 else None
    model.train()
    total, count = 0.0, 0
    for idx in batch_indices(x.shape[0], batch_size, generator, epochs=epochs, steps=steps):
        idx = idx.to(x.device)
        xb, yb = x[idx], y[idx]
        if augment is not None:
            xb = augment(xb, generator)
        loss0 = loss_fn(model, xb, yb)
        grads = torch.autograd.grad(loss0, params)
        total += float(loss0.detach())
        if rho > 0:
            with torch.no_grad():
                gnorm = torch.sqrt(sum((g * g).sum() for g in grads))
                scale = rho / (gnorm + 1e-12)
                eps = [g * scale for g in grads]
                for p, e in zip(params, eps):
                    p.add_(e)
            loss = loss_fn(model, xb, yb)
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, e in zip(params, eps):
                    p.sub_(e)
        with torch.no_grad():
            grads = [g.detach() for g in grads]
            if clip_norm is not None:
                gnorm = torch.sqrt(sum((g * g).sum() for g in grads))
                if gnorm > clip_norm:
                    grads = [g * (clip_norm / (gnorm + 1e-6)) for g in grads]
            for j, (p, g) in enumerate(zip(params, grads)):
                d = g
                if weight_decay:
                    d = d + weight_decay * p
                if anchor is not None:
                    d = d + lam * (p - anchor[j])
                if bufs is not None:
                    bufs[j].mul_(momentum).sub_(lr * d)
                    p.add_(bufs[j])
                else:
                    p.sub_(lr * d)
        count += 1
    return {"train_loss": total / max(count, 1), "steps": float(count)}
