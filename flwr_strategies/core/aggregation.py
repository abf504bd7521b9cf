"""Aggregation shared by the centralized methods (framework-neutral, NumPy only)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..common import PARTITION_KEY

__all__ = ["fedavg_average", "weighted_average", "weighted_mean_metrics"]

#: Metrics that are bookkeeping, not measurements: never averaged.
SKIP_KEYS = frozenset({PARTITION_KEY, "num-examples"})


def _scaled_into(out: np.ndarray, x: np.ndarray, s: np.float64) -> np.ndarray:
    if np.can_cast(s, out.dtype, casting="same_kind"):
        return np.multiply(x, s, out=out)
    return np.multiply(x, np.array(s, out.dtype), out=out)


def _add_into(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if np.can_cast(y, x.dtype, casting="same_kind"):
        return np.add(x, y, out=x)
    return np.add(x, np.array(y, x.dtype), out=x)


def weighted_average(models: Sequence[Sequence[np.ndarray]], weights: Sequence[float]) -> list[np.ndarray]:
    """``sum_i p_i w_i`` per array, with exactly the arithmetic of Flower's legacy
    ``aggregate_inplace`` (FedAvg's default): each array is scaled in its own dtype (so an integer
    buffer such as BatchNorm's ``num_batches_tracked`` is scaled by a factor cast to an integer),
    and the scaled arrays are summed in client order. Inputs are not modified.

    Raises ``ValueError`` for no models or mismatched counts of models, weights or arrays.
    """
    if len(models) == 0:
        raise ValueError("no client models to average")
    if len(models) != len(weights):
        raise ValueError(f"{len(models)} models but {len(weights)} weights")
    factors = np.asarray([float(w) for w in weights])
    out = [_scaled_into(np.empty_like(np.asarray(x)), np.asarray(x), factors[0]) for x in models[0]]
    for i, model in enumerate(models[1:], start=1):
        if len(model) != len(out):
            raise ValueError(f"client {i} sent {len(model)} arrays, expected {len(out)}")
        for acc, x in zip(out, model):
            x = np.asarray(x)
            _add_into(acc, _scaled_into(np.empty_like(x), x, factors[i]))
    return out


def fedavg_average(models: Sequence[Sequence[np.ndarray]], num_examples: Sequence[int]) -> list[np.ndarray]:
    """FedAvg's example-weighted average: :func:`weighted_average` with ``p_i = n_i / sum_j n_j``.

    Raises ``ValueError`` for no models, mismatched counts or a zero total of examples.
    """
    if len(models) != len(num_examples):
        raise ValueError(f"{len(models)} models but {len(num_examples)} example counts")
    total = sum(int(n) for n in num_examples)
    if len(models) and total <= 0:
        raise ValueError("all clients reported num_examples = 0: nothing to average")
    return weighted_average(models, [int(n) / total for n in num_examples] if len(models) else [])


def weighted_mean_metrics(results: Sequence[tuple[float, Mapping[str, Any]]],
                          skip: frozenset[str] = SKIP_KEYS) -> dict[str, float]:
    """Example-weighted mean of every numeric metric (the keys in ``skip`` excluded: by default
    ``partition-id`` and ``num-examples``); a metric only some clients report is averaged over them."""
    total = sum(n for n, _ in results)
    if total == 0:
        return {}
    keys = sorted({k for _, m in results for k, v in m.items()
                   if k not in skip and isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)})
    out: dict[str, float] = {}
    for key in keys:
        pairs = [(n, float(m[key])) for n, m in results if key in m]
        weight = sum(n for n, _ in pairs)
        if weight:
            out[key] = sum(n * v for n, v in pairs) / weight
    return out


def fedavg_average_stream(num_examples: Sequence[int], models: Iterable[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """:func:`fedavg_average` one model at a time: decode one reply, add it, move on.

    ``models`` may be any iterable, typically a generator that decodes each client's arrays only
    when asked, so at most one client's model is decoded at any time. The weights come first:
    ``n_i / sum_j n_j`` needs every count before the first model is scaled. The result is
    bit-identical to ``fedavg_average(list(models), num_examples)``: each array is scaled in its
    own dtype and the scaled arrays are summed in client order (Flower's ``aggregate_inplace``
    arithmetic). Each product goes into one scratch buffer per dtype, reused for every client, so
    the memory held is the sum (one model), the scratch (the largest array) and the model being
    added. Inputs are not modified.

    Raises ``ValueError`` for no models, a model count other than ``len(num_examples)``,
    mismatched array counts or a zero total of examples.
    """
    if len(num_examples) == 0:
        raise ValueError("no client models to average")
    total = sum(int(n) for n in num_examples)
    if total <= 0:
        raise ValueError("all clients reported num_examples = 0: nothing to average")
    factors = np.asarray([int(n) / total for n in num_examples])
    out: list[np.ndarray] = []
    scratch: dict[np.dtype, np.ndarray] = {}
    count = 0
    for model in models:  # (not enumerate: its reused result tuple would keep the last model alive)
        i = count
        if i >= len(factors):
            raise ValueError(f"more than {len(factors)} models for {len(factors)} example counts")
        arrays = [np.asarray(x) for x in model]
        if i == 0:
            out = [_scaled_into(np.empty_like(x), x, factors[0]) for x in arrays]
        elif len(arrays) != len(out):
            raise ValueError(f"client {i} sent {len(arrays)} arrays, expected {len(out)}")
        else:
            for acc, x in zip(out, arrays):
                buf = scratch.get(x.dtype)
                if buf is None or buf.size < x.size:  # grows to the largest array of this dtype
                    buf = scratch[x.dtype] = np.empty(x.size, dtype=x.dtype)
                _add_into(acc, _scaled_into(buf[: x.size].reshape(x.shape), x, factors[i]))
        count = i + 1
        del model, arrays  # let the next client's model take this one's place
    if count != len(factors):
        raise ValueError(f"{count} models but {len(factors)} example counts")
    return out
