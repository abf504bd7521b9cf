"""One client's local FedMeZO round: H MeZO steps over a deterministic, stateless data cursor.

The reference iterates a shuffled loader that continues across rounds. Flower simulation clients
are stateless, so example ``s`` of client ``i``'s stream (``s = ((round-1)*H + k)*B + b``) is
``perm_e[s mod n_i]`` with ``e = s // n_i`` and ``perm_e`` a permutation seeded by
``(run_seed, partition_id, e)``: every epoch visits each example once, nothing is stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .engine import MeZOEngine
from .zseed import derive_seed


def cursor_indices(n: int, start: int, count: int, run_seed: int, partition_id: int) -> list[int]:
    """Indices ``start .. start+count-1`` of the client's endless without-replacement stream."""
    if n <= 0:
        raise ValueError(f"client {partition_id} has an empty training set; cannot draw a batch")
    out, cache = [], {}
    for s in range(start, start + count):
        e = s // n
        if e not in cache:
            cache[e] = np.random.default_rng(np.random.SeedSequence([int(run_seed), int(partition_id), e])).permutation(n)
        out.append(int(cache[e][s % n]))
    return out


def mezo_local_train(
    engine: MeZOEngine,
    loss_on: Callable[[Sequence[int]], object],
    n_train: int,
    *,
    lr: float,
    steps: int,
    batch_size: int,
    run_seed: int,
    server_round: int,
    partition_id: int,
) -> dict:
    """Run ``steps`` MeZO steps; ``loss_on(indices)`` returns the loss on those train examples.

    Returns a dict with ``train_loss`` (mean L+ over non-skipped steps, the reference's logged
    loss), ``train_loss_mid`` (mean (L+ + L-)/2), ``n_skipped``, ``proj_grad_abs_mean`` and
    ``pairs`` (the (seed, coef) updates, in order, for the seed-and-scalar upload).
    """
    if steps < 1 or batch_size < 1:
        raise ValueError(f"local_steps and batch_size must be >= 1, got {steps}, {batch_size}")
    if n_train <= 0:
        raise ValueError(f"client {partition_id} has an empty training set; cannot run MeZO steps")
    lp, mid, gabs, pairs = [], [], [], []
    skipped0 = engine.n_skipped
    for k in range(steps):
        s0 = ((int(server_round) - 1) * steps + k) * batch_size
        idx = cursor_indices(n_train, s0, batch_size, run_seed, partition_id)
        seed = derive_seed(run_seed, server_round, partition_id, k)
        res = engine.step(lambda: loss_on(idx), lr, seed)
        if res.skipped:
            continue
        lp.append(res.loss_plus)
        mid.append(0.5 * (res.loss_plus + res.loss_minus))
        gabs.append(abs(res.g))
        pairs.extend(res.pairs)
    nan = float("nan")
    return {
        "train_loss": float(np.mean(lp)) if lp else nan,
        "train_loss_mid": float(np.mean(mid)) if mid else nan,
        "n_skipped": int(engine.n_skipped - skipped0),
        "proj_grad_abs_mean": float(np.mean(gabs)) if gabs else nan,
        "pairs": pairs,
    }
