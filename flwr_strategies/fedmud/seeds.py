"""Shared seeds for FedMUD's random factors (Li et al., ICML 2025, Sections 3.1 and 4.3).

Server and clients derive every random factor from ``(round_seed, layer_index, factor_id)`` with
NumPy's ``SeedSequence`` and draw it on the CPU with an explicit ``torch.Generator``, so two
independently built replicas hold bit-identical factors and the frozen factors never need to be
sent. ``factor_id`` 0 is the left factor (U / A, or U~ / A~), 1 the right one (V / B, or the second
frozen AAD factor, the code's ``seed + 42`` stream); FedPara uses ids 0-3.
"""

from __future__ import annotations

import numpy as np
import torch

from .config import INIT_DISTS

__all__ = ["factor_generator", "draw_factor", "INIT_DISTS"]


def factor_generator(round_seed: int, layer_index: int, factor_id: int) -> torch.Generator:
    """A CPU generator seeded by ``(round_seed, layer_index, factor_id)``."""
    if round_seed < 0 or layer_index < 0 or factor_id < 0:
        raise ValueError(f"seeds must be >= 0, got {(round_seed, layer_index, factor_id)}")
    state = np.random.SeedSequence([int(round_seed), int(layer_index), int(factor_id)]).generate_state(2, np.uint32)
    gen = torch.Generator(device="cpu")
    gen.manual_seed((int(state[0]) << 31) ^ int(state[1]))
    return gen


def draw_factor(shape, scale: float, dist: str, generator: torch.Generator) -> torch.Tensor:
    """``Uniform(-scale, scale)`` (default) or ``Normal(0, scale)`` float32 tensor on the CPU."""
    if dist == "uniform":
        return (torch.rand(shape, generator=generator, dtype=torch.float32) * 2.0 - 1.0) * scale
    if dist == "normal":
        return torch.randn(shape, generator=generator, dtype=torch.float32) * scale
    raise ValueError(f"init_dist must be one of {INIT_DISTS}, got {dist!r}")
