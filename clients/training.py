"""Framework-neutral local training helpers for PyTorch models.

Everything here is independent of Flower: weights move as lists of NumPy arrays in
``state_dict`` order, data lives in :class:`TensorData` (tensors already on the device) or any
iterable of ``(x, y)`` batches, and all randomness comes from an explicit ``torch.Generator`` built
by :func:`client_generator`, so a client's work is a pure function of (weights, data, config, seed,
round, partition). :func:`local_sgd` is plain SGD on the one local-training loop
(:mod:`flwr_strategies.core.local`) that every client shares.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flwr_strategies.core.local import batch_stream, criterion, evaluate, train_steps


@dataclass
class TensorData:
    """Inputs ``x`` and integer labels ``y`` of one dataset split, as tensors.

    ``augment``, when set, is applied to each training minibatch as ``augment(xb, generator)``.
    """

    x: torch.Tensor
    y: torch.Tensor
    augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y):
            raise ValueError(f"x has {len(self.x)} rows but y has {len(self.y)}")

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def subset(self, indices: np.ndarray | torch.Tensor) -> "TensorData":
        """The rows at ``indices`` (a copy), keeping the augmentation."""
        idx = torch.as_tensor(np.asarray(indices), dtype=torch.long, device=self.x.device)
        return TensorData(self.x[idx], self.y[idx], self.augment)

    def to(self, device: torch.device | str) -> "TensorData":
        """The same data on ``device``."""
        return TensorData(self.x.to(device), self.y.to(device), self.augment)


def client_generator(seed: int, server_round: int, partition_id: int, stream: int = 0) -> torch.Generator:
    """The CPU generator a client uses in ``server_round``: a hash of (seed, round, partition, stream)."""
    state = np.random.SeedSequence([int(seed), int(server_round), int(partition_id), int(stream)])
    gen = torch.Generator()
    gen.manual_seed(int(state.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)))
    return gen


def count_examples(data: Any) -> int:
    """Number of training examples in ``data``: ``len`` of a dataset of examples (:class:`TensorData`,
    the language-model clients' tokenised examples: anything with ``subset`` and ``len``), of a
    DataLoader's sampler (when it batches) or dataset, else the labels counted over one pass of
    ``(x, y)`` batches."""
    if isinstance(data, TensorData) or (hasattr(data, "subset") and hasattr(data, "__len__")):
        return len(data)
    sampler = getattr(data, "sampler", None)
    if sampler is not None and hasattr(sampler, "__len__") and getattr(data, "batch_sampler", None) is not None:
        return len(sampler)
    dataset = getattr(data, "dataset", None)
    if dataset is not None and hasattr(dataset, "__len__"):
        return len(dataset)
    return int(sum(len(batch[1]) for batch in data))


def get_weights(model: nn.Module) -> list[np.ndarray]:
    """All ``state_dict`` entries (parameters and buffers) as NumPy arrays, in order.

    The arrays are copies, so later training of ``model`` does not change them.
    """
    return [t.detach().cpu().numpy().copy() for t in model.state_dict().values()]


def set_weights(model: nn.Module, arrays: list[np.ndarray]) -> None:
    """Copy ``arrays`` into ``model``'s ``state_dict`` tensors in place (shapes must match)."""
    tensors = list(model.state_dict().values())
    if len(arrays) != len(tensors):
        raise ValueError(f"model has {len(tensors)} state tensors but {len(arrays)} arrays were given")
    with torch.no_grad():
        for i, (t, a) in enumerate(zip(tensors, arrays)):
            a = np.asarray(a)
            if tuple(t.shape) != tuple(a.shape):
                raise ValueError(f"state tensor {i} has shape {tuple(t.shape)}, array has {a.shape}")
            t.copy_(torch.from_numpy(a).to(dtype=t.dtype))


def local_sgd(
    model: nn.Module,
    data: Any,
    *,
    lr: float,
    batch_size: int | None = None,
    generator: torch.Generator | None = None,
    epochs: int | None = 1,
    steps: int | None = None,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    grad_clip: float | None = None,
    extra_loss: Callable[[nn.Module], torch.Tensor] | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
    before_clip: Callable[[], None] | None = None,
    before_step: Callable[[], None] | None = None,
    device: Any = None,
    check_finite: str | None = None,
) -> dict[str, float]:
    """``torch.optim.SGD`` (``lr``, ``momentum``, ``weight_decay``) for ``steps`` steps or ``epochs``
    epochs over ``data``; returns the mean loss and the step count.

    ``data`` is :class:`TensorData` (shuffled minibatches of ``batch_size`` from ``generator``) or
    any iterable of ``(x, y)`` batches such as a ``DataLoader`` (its own batches, moved to
    ``device``); see :func:`~flwr_strategies.core.local.batch_stream`. After each ``backward()``:
    ``before_clip()``, gradient-norm clipping at ``grad_clip`` over the trainable parameters, then
    ``before_step()`` (e.g. :meth:`~flwr_strategies.fedli.scaffold.ScaffoldCorrection.apply` before
    or after the clip). ``extra_loss(model)`` is added to every batch loss (e.g. FedProx's proximal
    term); the reported ``train_loss`` is the mean data loss (without the extra term) over the steps
    taken. Parameters with ``requires_grad=False`` (FedMUD's frozen bases) are not updated.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    clip = None if grad_clip is None else (lambda: nn.utils.clip_grad_norm_(params, grad_clip))
    hooks = [h for h in (before_clip, clip, before_step) if h is not None]
    batches = batch_stream(data, epochs=epochs, steps=steps, batch_size=batch_size, generator=generator, device=device)
    return train_steps(model, batches, opt, objective=criterion(loss_fn), extra_loss=extra_loss,
                       after_backward=hooks, check_finite=check_finite)


def evaluate_model(
    model: nn.Module,
    data: Any,
    batch_size: int = 1024,
    loss_fn: Callable[..., torch.Tensor] = F.cross_entropy,
    device: Any = None,
) -> tuple[float, float]:
    """Mean loss and accuracy of ``model`` on ``data`` (:class:`TensorData` or ``(x, y)`` batches)."""
    loss, acc, _ = evaluate(model, data, batch_size=batch_size, loss_fn=loss_fn, device=device)
    return loss, acc
