"""The one local-training loop every client of this library runs, and its batch source.

Each method's client side is a small piece on the user's own ``nn.Module``, in the style of
``torch.optim`` and ``torch.nn.utils.parametrize``: an optimizer (``ArmijoSGD``, ``LocalSGD``), a
wrapper around one (``SAM``), a gradient hook (``MoreauEnvelope``, ``ScaffoldCorrection``) or a
parametrisation (``FedMUDRound``). A user's own loop drives them directly. The ready-made clients
and the convenience functions (``local_sgd``, ``run_local``, ``scaffold_local_sgd``,
``armijo_local_train``) drive them with :func:`train_steps` over :func:`batch_stream`, so there is
one loop to read, test and keep correct::

    batches = batch_stream(loader, epochs=1)                       # or in-memory data + a generator
    stats = train_steps(model, batches, torch.optim.SGD(model.parameters(), lr=0.05),
                        after_backward=[correction.apply])         # {"train_loss": ..., "steps": ...}

Framework-neutral: torch only, no Flower.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

__all__ = ["Objective", "batch_stream", "criterion", "evaluate", "index_batches", "train_steps", "watch_steps"]

#: The loss of one minibatch: ``objective(model, inputs, labels) -> scalar tensor``.
Objective = Callable[[torch.nn.Module, Any, torch.Tensor], torch.Tensor]


def criterion(loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy) -> Objective:
    """The objective ``loss_fn(model(x), y)`` of a ``torch.nn`` style criterion (default: cross-entropy)."""

    def objective(model: torch.nn.Module, xb: Any, yb: torch.Tensor) -> torch.Tensor:
        return loss_fn(model(xb), yb)

    return objective


def _in_memory(data: Any) -> bool:
    return isinstance(getattr(data, "x", None), torch.Tensor) and isinstance(getattr(data, "y", None), torch.Tensor)


def index_batches(n: int, batch_size: int, generator: torch.Generator | None, *, epochs: int | None = None,
                  steps: int | None = None) -> Iterator[torch.Tensor]:
    """Shuffled minibatch index tensors over ``n`` samples: ``epochs`` full passes or exactly ``steps``
    batches (a new permutation from ``generator`` at the start of every pass; the last batch of a pass
    may be smaller). Exactly one of ``epochs`` / ``steps`` must be set."""
    if (epochs is None) == (steps is None):
        raise ValueError(f"set exactly one of epochs/steps, got epochs={epochs!r}, steps={steps!r}")
    if n <= 0:
        raise ValueError("cannot train on an empty dataset")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    done, passes = 0, 0
    while (epochs is None or passes < epochs) and (steps is None or done < steps):
        order = torch.randperm(n, generator=generator)
        passes += 1
        for start in range(0, n, batch_size):
            yield order[start:start + batch_size]
            done += 1
            if steps is not None and done == steps:
                return


def _pair(batch: Any, device: Any) -> tuple[Any, torch.Tensor]:
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError(f"training batches must be (inputs, labels) pairs, got {type(batch).__name__}")
    xb, yb = batch
    if device is not None:
        xb, yb = xb.to(device), yb.to(device)
    return xb, yb


def batch_stream(data: Any, *, epochs: int | None = None, steps: int | None = None, batch_size: int | None = None,
                 generator: torch.Generator | None = None, device: Any = None) -> Iterator[tuple[Any, torch.Tensor]]:
    """The ``(inputs, labels)`` minibatches of one local run: ``steps`` batches when set (> 0), else
    ``epochs`` passes (default 1).

    ``data`` is either in-memory data (an object with tensors ``x`` and ``y`` and an optional
    ``augment(xb, generator)``, such as :class:`~flwr_strategies.clients.training.TensorData`), batched
    into shuffled minibatches of ``batch_size`` drawn from ``generator`` (the seeded path of the
    project's clients), or any re-iterable of ``(inputs, labels)`` pairs such as a ``DataLoader``
    (its own batches and order; re-iterated for each pass; batches moved to ``device``).
    """
    if steps is not None and (isinstance(steps, bool) or int(steps) != steps or steps < 0):
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    if steps:
        epochs = None
    else:
        steps, epochs = None, int(epochs or 1)
    if _in_memory(data):
        if batch_size is None:
            raise ValueError("in-memory training data needs a batch_size")
        augment = getattr(data, "augment", None)
        for idx in index_batches(len(data.y), int(batch_size), generator, epochs=epochs, steps=steps):
            idx = idx.to(data.x.device)
            xb, yb = data.x[idx], data.y[idx]
            if augment is not None and generator is not None:
                xb = augment(xb, generator)
            yield _pair((xb, yb), device)
        return
    done, passes = 0, 0
    while epochs is None or passes < epochs:
        passes += 1
        empty = True
        for batch in data:
            empty = False
            yield _pair(batch, device)
            done += 1
            if steps is not None and done == steps:
                return
        if empty:
            raise ValueError("the training data yielded no batches")


def train_steps(model: torch.nn.Module, batches: Iterable[tuple[Any, torch.Tensor]], optimizer: Any, *,
                objective: Objective | None = None,
                extra_loss: Callable[[torch.nn.Module], torch.Tensor] | None = None,
                after_backward: Sequence[Callable[[], None]] = (),
                after_step: Sequence[Callable[[], None]] = (),
                check_finite: str | None = None) -> dict[str, float | int]:
    """Run one local training run in place on ``model``: one optimizer step per minibatch.

    Per batch: ``zero_grad``; ``loss = objective(model, x, y)`` (default cross-entropy of
    ``model(x)``); ``backward()`` of ``loss + extra_loss(model)``; every callable of
    ``after_backward`` in order (a gradient correction, clipping); ``optimizer.step()``. Two kinds of
    pieces step differently, as their class attribute ``closure`` says:

    - ``closure = "loss"`` (a line search such as ``ArmijoSGD``): ``optimizer.step(closure)`` with a
      closure that returns the minibatch loss; the optimizer differentiates it itself and returns
      the loss before its step (``extra_loss`` and ``after_backward`` do not apply);
    - ``closure = "gradient"`` (``SAM``): after the first ``backward()``, ``optimizer.step(closure)``
      with a closure that zeroes the gradients and recomputes loss and gradients on the same batch.

    Parameters
    ----------
    model : torch.nn.Module
        Trained in place (put in train mode).
    batches : iterable of ``(inputs, labels)``
        The minibatches (:func:`batch_stream`).
    optimizer : torch.optim.Optimizer or a piece with ``step``/``zero_grad``
        Holds the parameters to train.
    objective : callable ``(model, x, y) -> loss``, optional
        The minibatch loss; default ``criterion()`` (cross-entropy).
    extra_loss : callable ``model -> tensor``, optional
        Added to the loss before ``backward()`` (e.g. FedProx's proximal term); not in the report.
    after_backward : sequence of callables (default: none)
        Run after every ``backward()``, before the step.
    after_step : sequence of callables (default: none)
        Run after every step (e.g. a per-step record).
    check_finite : str, optional
        When set, a non-finite minibatch loss raises ``FloatingPointError`` naming this client and
        the step, before the step is taken.

    Returns ``{"train_loss": mean minibatch loss before each step, "steps": number of steps}``; the
    gradients are cleared at the end.
    """
    objective = objective or criterion()
    kind = getattr(optimizer, "closure", None)
    model.train()
    total, count = 0.0, 0
    for xb, yb in batches:
        if kind == "loss":
            value = float(optimizer.step(lambda: objective(model, xb, yb)))  # noqa: B023 (called at once)
        else:
            optimizer.zero_grad(set_to_none=True)
            loss = objective(model, xb, yb)
            value = float(loss.detach())
            if check_finite is not None and not math.isfinite(value):
                raise FloatingPointError(f"{check_finite}: non-finite minibatch loss at local step {count + 1}")
            (loss + extra_loss(model) if extra_loss is not None else loss).backward()
            for hook in after_backward:
                hook()
            if kind == "gradient":

                def again(xb=xb, yb=yb) -> torch.Tensor:
                    optimizer.zero_grad(set_to_none=True)
                    loss2 = objective(model, xb, yb)
                    (loss2 + extra_loss(model) if extra_loss is not None else loss2).backward()
                    return loss2

                optimizer.step(again)
            else:
                optimizer.step()
        for hook in after_step:
            hook()
        total += value
        count += 1
    optimizer.zero_grad(set_to_none=True)
    return {"train_loss": total / max(count, 1), "steps": count}


@torch.no_grad()
def evaluate(model: torch.nn.Module, data: Any, *, batch_size: int = 1024, device: Any = None,
             loss_fn: Callable[..., torch.Tensor] = F.cross_entropy) -> tuple[float, float, int]:
    """Mean loss, accuracy and number of examples of ``model`` on ``data`` (in-memory data in
    unshuffled chunks of ``batch_size``, or any iterable of ``(inputs, labels)`` pairs); ``loss_fn``
    must accept ``reduction="sum"``."""
    model.eval()
    if _in_memory(data):
        n_all = len(data.y)
        pairs: Iterable = ((data.x[s:s + batch_size], data.y[s:s + batch_size]) for s in range(0, n_all, batch_size))
    else:
        pairs = (_pair(batch, device) for batch in data)
    loss_sum, correct, n = 0.0, 0, 0
    for xb, yb in pairs:
        out = model(xb)
        loss_sum += float(loss_fn(out, yb, reduction="sum"))
        correct += int((out.argmax(dim=1) == yb).sum())
        n += int(yb.shape[0])
    if n == 0:
        raise ValueError("cannot evaluate on an empty dataset")
    return loss_sum / n, correct / n, n


class _Watch:
    """One owner's registration with the process-wide step hooks (see :func:`watch_steps`)."""

    def __init__(self, owner: Any, before: str | None, after: str | None) -> None:
        self.owner, self.before, self.after = weakref.ref(owner), before, after

    def remove(self) -> None:
        """Stop watching."""
        with _LOCK:
            _WATCHES.discard(self)


_WATCHES: set[_Watch] = set()
_LOCK = threading.Lock()
_HOOKS: list = []  # torch's global hook handles: registered once per process, never removed


def _dispatch(kind: str):
    def hook(optimizer, args, kwargs) -> None:
        with _LOCK:
            watches = list(_WATCHES)
        for watch in watches:
            owner, name = watch.owner(), getattr(watch, kind)
            if owner is None:
                watch.remove()
            elif name is not None:
                getattr(owner, name)(optimizer)

    return hook


def watch_steps(owner: Any, *, before: str | None = None, after: str | None = None) -> _Watch:
    """Watch every ``torch.optim`` step in the process while ``owner`` lives: ``owner.<before>(optimizer)``
    runs before and ``owner.<after>(optimizer)`` after each step. How the client pieces see the user's
    own optimizer (``ScaffoldCorrection``, ``FedMUDRound``).

    Returns a handle whose ``remove()`` stops watching; ``owner`` is held weakly (a collected owner
    stops too). One pair of torch's global step hooks serves every watcher and is never removed, so
    clients training in threads (Flower's legacy server runs them in a thread pool) can register and
    remove watchers while another thread steps.
    """
    with _LOCK:
        if not _HOOKS:
            _HOOKS.append(register_optimizer_step_pre_hook(_dispatch("before")))
            _HOOKS.append(register_optimizer_step_post_hook(_dispatch("after")))
        watch = _Watch(owner, before, after)
        _WATCHES.add(watch)
    return watch
