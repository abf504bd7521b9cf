"""One round of local Armijo-SGD on a torch model (the FedLi-LS client's local work, paper Alg. 3)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F

from ..core.local import criterion, train_steps
from .armijo import ArmijoConfig
from .armijo_optim import ArmijoSGD

__all__ = ["armijo_local_train", "make_closure"]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def make_closure(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    seed: int,
    loss_fn: LossFn = F.cross_entropy,
) -> Callable[[], torch.Tensor]:
    """Return a closure evaluating ``loss_fn(model(x), y)`` under a fixed RNG state.

    Every call re-seeds a forked copy of torch's RNG with ``seed`` (the ``sls`` package's per-step
    reseeding), so stochastic layers such as dropout draw identical masks on every trial while the
    caller's global RNG state is left untouched.
    """
    devices = [x.device.index or 0] if x.device.type == "cuda" else []

    def closure() -> torch.Tensor:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            return loss_fn(model(x), y)

    return closure


def armijo_local_train(
    model: torch.nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    config: ArmijoConfig,
    generator: torch.Generator,
    *,
    batch_fraction: float,
    loss_fn: LossFn = F.cross_entropy,
    on_step: Callable[[int, object], None] | None = None,
) -> dict[str, float | int]:
    """Run Armijo-SGD (:class:`~flwr_strategies.fedli.armijo_optim.ArmijoSGD`) over ``batches``
    (``(inputs, labels)`` minibatches), updating ``model`` in place.

    ``batch_fraction`` is ``b / n_i`` (batch size over local training-set size) for reset option 2.
    The step size restarts at ``config.eta_max`` at the first step (no state across rounds).
    ``generator`` (the client's seeded generator) draws one seed per step for the closure.
    No weight decay and no gradient clipping (they would break the sufficient-decrease test). Runs
    on the one local loop, :func:`~flwr_strategies.core.local.train_steps`.

    Returns ``{"step_size", "train_loss", "n_backtracks", "n_fallback", "steps"}``: the step size
    of the last local step, the mean minibatch loss before each step, total reductions, the number
    of steps where no trial was accepted, and the number of steps.
    """
    if not batch_fraction > 0:
        raise ValueError(f"`batch_fraction` (b / n_i) must be > 0, got {batch_fraction!r}")
    opt = ArmijoSGD(model.parameters(), config, batch_fraction=batch_fraction, generator=generator)
    after = [lambda: on_step(opt.steps, opt.last_result)] if on_step is not None else []
    train_steps(model, batches, opt, objective=criterion(loss_fn), after_step=after)
    for p in model.parameters():
        p.grad = None
    return opt.summary()
