"""Seeded random streams of DO-ADP (no global RNG state, identical on every backend).

* activation coins: one generator per (seed, iteration) drawing n uniforms, agent i active iff
  ``u_i < p``; held by whoever emulates the network (the strategy or the reference simulator);
* agent randomness: one generator per (seed, iteration, agent) used, in this order, for the sample
  indices and then the Gaussian noise. The client and the simulator draw the same numbers.
"""

from __future__ import annotations

import numpy as np

_ACTIVATION = 0xAC7
_AGENT = 0xA6E


def activation_mask(seed: int, t: int, n: int, p: float) -> np.ndarray:
    """Boolean activation vector eta_{., t} (length n) with P(active) = p."""
    u = np.random.default_rng([_ACTIVATION, int(seed), int(t)]).random(n)
    return u < p


def agent_rng(seed: int, t: int, i: int) -> np.random.Generator:
    """Generator for agent i's sample choice and noise at iteration t."""
    return np.random.default_rng([_AGENT, int(seed), int(t), int(i)])


def draw_samples(rng: np.random.Generator, q: int, batch_size: int) -> np.ndarray:
    """Indices of ``batch_size`` samples drawn uniformly (with replacement) from ``q``."""
    return rng.integers(0, q, size=batch_size)
