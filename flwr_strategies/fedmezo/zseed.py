"""Seeds and seed-regenerated Gaussian perturbation directions.

MeZO never stores the direction ``z``: each step keeps only an integer seed and regenerates ``z``
whenever it is needed (perturb +mu, perturb -2mu, restore, update, and server-side replay). Every
regeneration must be bit-identical, so ``z`` is drawn from a dedicated ``torch.Generator`` (the
global torch RNG is never touched) over the trainable tensors in a fixed canonical order.

Two modes for where ``z`` is drawn (``z_device``):

- ``"cpu"`` (default, portable): fp32 normals from a CPU generator, then cast/moved to the
  parameter's dtype and device. Identical on every machine and process, as the seed-and-scalar
  replay needs.
- ``"param"``: a generator on the parameter's device, drawn in the parameter's dtype. Faster on GPU,
  deterministic only on the same device type.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from ..core.validation import check_choice
from .config import Z_DEVICES

_SEED_MAX = 2**63 - 1


def derive_seed(run_seed: int, server_round: int, partition_id: int, step: int, direction: int = 0) -> int:
    """Deterministic 63-bit seed of one MeZO direction.

    ``SeedSequence([run_seed, server_round, partition_id, step, direction])`` so that stateless
    Flower clients and re-runs reproduce the same perturbations (MeZO's seed trick, Malladi et al.,
    NeurIPS 2023, Alg. 1, with a seed per client, round and step).
    All arguments must be non-negative integers.
    """
    parts = [int(run_seed), int(server_round), int(partition_id), int(step), int(direction)]
    if any(p < 0 for p in parts):
        raise ValueError(f"derive_seed needs non-negative integers, got {parts}")
    state = np.random.SeedSequence(parts).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & _SEED_MAX


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A fresh ``torch.Generator`` on ``device`` seeded with ``seed``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return gen


def iter_z(tensors: Sequence[torch.Tensor], seed: int, z_device: str = "cpu") -> Iterator[torch.Tensor]:
    """Yield ``z`` for each tensor in order, one tensor at a time (never all of ``z`` at once).

    A new generator is seeded at every call, so two calls with the same seed, tensor order,
    shapes, dtypes and devices give bit-identical directions.
    """
    check_choice("z_device", z_device, Z_DEVICES)
    gens: dict[str, torch.Generator] = {}
    for p in tensors:
        if z_device == "cpu":
            gen = gens.get("cpu")
            if gen is None:
                gen = gens["cpu"] = make_generator(seed, "cpu")
            z = torch.randn(p.shape, generator=gen, dtype=torch.float32, device="cpu")
            yield z.to(device=p.device, dtype=p.dtype)
        else:
            key = str(p.device)
            gen = gens.get(key)
            if gen is None:
                gen = gens[key] = make_generator(seed, p.device)
            yield torch.randn(p.shape, generator=gen, dtype=p.dtype, device=p.device)


def z_like(tensors: Sequence[torch.Tensor], seed: int, z_device: str = "cpu") -> list[torch.Tensor]:
    """Materialise the whole direction (for tests and analysis only; the engine never does)."""
    return list(iter_z(tensors, seed, z_device))
