"""Framework-neutral local training helpers for PyTorch models.

Everything here is independent of Flower: weights move as lists of NumPy arrays in
``state_dict`` order, data lives in :class:`TensorData` (tensors already on the device) and all
randomness comes from an explicit ``torch.Generator`` built by :func:`client_generator`, so a
client's work is a pure function of (weights, data, config, seed, round, partition).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


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


def _state_tensors(model: nn.Module) -> list[torch.Tensor]:
    return list(model.state_dict().values())


def get_weights(model: nn.Module) -> list[np.ndarray]:
    """All ``state_dict`` entries (parameters and buffers) as NumPy arrays, in order.

    The arrays are copies, so later training of ``model`` does not change them.
    """
    return [t.detach().cpu().numpy().copy() for t in _state_tensors(model)]


def set_weights(model: nn.Module, arrays: list[np.ndarray]) -> None:
    """Copy ``arrays`` into ``model``'s ``state_dict`` tensors in place (shapes must match)."""
    tensors = _state_tensors(model)
    if len(arrays) != len(tensors):
        raise ValueError(f"model has {len(tensors)} state tensors but {len(arrays)} arrays were given")
    with torch.no_grad():
        for i, (t, a) in enumerate(zip(tensors, arrays)):
            a = np.asarray(a)
            if tuple(t.shape) != tuple(a.shape):
                raise ValueError(f"state tensor {i} has shape {tuple(t.shape)}, array has {a.shape}")
            t.copy_(torch.from_numpy(a).to(dtype=t.dtype))


def minibatches(
    n: int,
    batch_size: int,
    generator: torch.Generator | None,
    shuffle: bool = True,
    drop_last: bool = False,
) -> Iterator[torch.Tensor]:
    """Index tensors of one pass over ``n`` samples (shuffled with ``generator``)."""
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    stop = n - (n % batch_size) if drop_last else n
    for start in range(0, stop, batch_size):
        yield order[start : start + batch_size]


def batch_stream(
    n: int, batch_size: int, generator: torch.Generator, *, epochs: int | None, steps: int | None
) -> Iterator[torch.Tensor]:
    """Index tensors for ``steps`` minibatches (reshuffling each pass) or ``epochs`` passes."""
    if n == 0:
        raise ValueError("cannot train on an empty dataset")
    if steps:
        done = 0
        while done < steps:
            for idx in minibatches(n, batch_size, generator):
                yield idx
                done += 1
                if done == steps:
                    return
    else:
        for _ in range(int(epochs or 1)):
            yield from minibatches(n, batch_size, generator)


def take_batch(data: TensorData, idx: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``idx`` of ``data``, augmented when ``data.augment`` is set."""
    idx = idx.to(data.x.device)
    xb, yb = data.x[idx], data.y[idx]
    if data.augment is not None and generator is not None:
        xb = data.augment(xb, generator)
    return xb, yb


def local_sgd(
    model: nn.Module,
    data: TensorData,
    *,
    lr: float,
    batch_size: int,
    generator: torch.Generator,
    epochs: int | None = 1,
    steps: int | None = None,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    grad_clip: float | None = None,
    extra_loss: Callable[[nn.Module], torch.Tensor] | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
) -> dict[str, float]:
    """Plain minibatch SGD for ``steps`` steps or ``epochs`` epochs; returns mean loss and step count.

    ``extra_loss(model)`` is added to every batch loss (e.g. FedProx's proximal term). The reported
    ``train_loss`` is the mean data loss (without the extra term) over the steps taken.
    """
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    total, count = 0.0, 0
    for idx in batch_stream(len(data), batch_size, generator, epochs=epochs, steps=steps):
        xb, yb = take_batch(data, idx, generator)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        objective = loss + extra_loss(model) if extra_loss is not None else loss
        objective.backward()
        if grad_clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        total += float(loss.detach())
        count += 1
    return {"train_loss": total / max(count, 1), "steps": count}


@torch.no_grad()
def evaluate_model(
    model: nn.Module,
    data: TensorData,
    batch_size: int = 1024,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
) -> tuple[float, float]:
    """Mean loss and accuracy of ``model`` on ``data``."""
    if len(data) == 0:
        raise ValueError("cannot evaluate on an empty dataset")
    model.eval()
    loss_sum, correct = 0.0, 0
    for idx in minibatches(len(data), batch_size, None, shuffle=False):
        xb, yb = data.x[idx.to(data.x.device)], data.y[idx.to(data.y.device)]
        out = model(xb)
        loss_sum += float(loss_fn(out, yb, reduction="sum"))
        correct += int((out.argmax(dim=1) == yb).sum())
    return loss_sum / len(data), correct / len(data)
