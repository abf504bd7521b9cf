"""A client's private randomness (activation coin, batch choice, DP noise).

Only the client holds it. By default every round draws fresh OS entropy
(``np.random.default_rng()`` seeds itself from ``secrets``), so nothing the server knows (the
experiment seed, the round, the messages) can reproduce a client's noise. A simulation may make a
client reproducible with a *client-side seed* that never passes through the server (a node's
``node_config`` or a per-node secret in ``context.state``, see
:func:`flwr_strategies.clients.doadp.set_client_seed`); the round's generator is then
``default_rng([TAG, client_seed, t])``.

Draw order inside a round (fixed, so the Flower client and the reference simulator agree): the
activation coin, then the batch indices (active agents only), then the Gaussian noise.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["agent_generator", "activation_coin", "draw_batch", "check_client_seed"]

_AGENT = 0xA6E5


def check_client_seed(client_seed) -> int | None:
    """``client_seed`` as an int >= 0, or None (OS entropy); anything else raises."""
    if client_seed is None:
        return None
    if isinstance(client_seed, bool) or not isinstance(client_seed, numbers.Integral) or int(client_seed) < 0:
        raise ValueError(f"client_seed must be an integer >= 0 or None, got client_seed={client_seed!r}")
    return int(client_seed)


def agent_generator(client_seed: int | None, t: int) -> np.random.Generator:
    """The generator of one agent in iteration ``t``: OS entropy when ``client_seed`` is None."""
    seed = check_client_seed(client_seed)
    return np.random.default_rng() if seed is None else np.random.default_rng([_AGENT, seed, int(t)])


def activation_coin(rng: np.random.Generator, p: float) -> bool:
    """eta ~ Bernoulli(p): one uniform draw, active iff it is below p."""
    return bool(rng.random() < p)


def draw_batch(rng: np.random.Generator, q: int, batch_size: int, sampling: str = "uniform") -> np.ndarray:
    """Indices of the batch: ``batch_size`` distinct records uniformly from ``range(q)``
    (``"uniform"``), or every record independently with probability ``batch_size / q``
    (``"poisson"``, variable size, possibly empty). Sorted int64."""
    q, b = int(q), int(batch_size)
    if not 1 <= b <= q:
        raise ValueError(f"batch_size must lie in [1, q] = [1, {q}], got batch_size={b}")
    if sampling == "uniform":
        return np.sort(rng.choice(q, size=b, replace=False)).astype(np.int64)
    if sampling == "poisson":
        return np.flatnonzero(rng.random(q) < b / q).astype(np.int64)
    raise ValueError(f"sampling must be 'uniform' or 'poisson', got sampling={sampling!r}")
