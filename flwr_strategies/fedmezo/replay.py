"""Seed-and-scalar upload (an extension, NOT part of FedMeZO's paper).

With weight decay 0 a client's local MeZO trajectory is linear in seed-generated directions::

    theta_i^{t,H} = theta^t - lr_i * sum_k coef_{i,k} * z(seed_{i,k})

so a client may upload its ``(seed, coef)`` pairs instead of its LoRA tensors, and the server
replays them from ``theta^t`` with the same generator scheme. Applying the same in-place fp32
operations in the same order gives bit-identical tensors when the client restored its
perturbations from a snapshot (``restore_mode="snapshot"``).

Wire format: a little-endian structured array of ``(seed: int64, coef: float64)`` records,
16 bytes per step (the float64 coefficient keeps the replay bit-exact).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .engine import MeZOEngine

PAIR_DTYPE = np.dtype([("seed", "<i8"), ("coef", "<f8")])


def encode_pairs(pairs: Sequence[tuple[int, float]]) -> bytes:
    """Pack ``(seed, coef)`` pairs to bytes (16 bytes per pair)."""
    arr = np.zeros(len(pairs), dtype=PAIR_DTYPE)
    for i, (s, c) in enumerate(pairs):
        arr[i] = (int(s), float(c))
    return arr.tobytes()


def decode_pairs(blob: bytes) -> list[tuple[int, float]]:
    """Inverse of :func:`encode_pairs`."""
    if len(blob) % PAIR_DTYPE.itemsize:
        raise ValueError(f"seed/scalar payload of {len(blob)} bytes is not a multiple of {PAIR_DTYPE.itemsize}")
    arr = np.frombuffer(blob, dtype=PAIR_DTYPE)
    return [(int(s), float(c)) for s, c in zip(arr["seed"], arr["coef"])]


def replay_updates(
    base: Sequence[np.ndarray | torch.Tensor],
    pairs: Sequence[tuple[int, float]],
    lr: float,
    *,
    z_device: str = "cpu",
    names: Sequence[str] | None = None,
) -> list[np.ndarray]:
    """Rebuild a client's final tensors from the round's start ``base`` and its uploaded pairs.

    ``lr`` is the learning rate the server sent that client. Weight decay must have been 0.
    """
    tensors = [torch.tensor(np.asarray(b)) if not torch.is_tensor(b) else b.detach().clone() for b in base]
    named = list(zip(names if names is not None else [f"t{i}" for i in range(len(tensors))], tensors))
    eng = MeZOEngine(named, mu=1.0, z_device=z_device)
    for s, c in pairs:
        eng.apply_update(s, float(lr), float(c))
    return [t.cpu().numpy() for t in tensors]
