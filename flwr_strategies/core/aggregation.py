"""Aggregation shared by the centralized methods (framework-neutral, NumPy only)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..common import PARTITION_KEY
from .validation import check_choice, is_real

__all__ = ["WEIGHTINGS", "aggregation_weights", "fedavg_average", "weighted_average", "weighted_mean_metrics"]

#: How a method may weight its clients: by their example counts, or equally.
WEIGHTINGS = ("num_examples", "uniform")

#: Metrics that are bookkeeping, not measurements: never averaged.
SKIP_KEYS = frozenset({PARTITION_KEY, "num-examples"})


def _into(op: np.ufunc, out: np.ndarray, x: np.ndarray, y: Any) -> np.ndarray:
    """``op(x, y, out=out)``, with ``y`` cast to ``out``'s dtype first where NumPy would not cast it."""
    if not np.can_cast(y, out.dtype, casting="same_kind"):
        y = np.array(y, out.dtype)
    return op(x, y, out=out)


#: elements per block of the widened products (a float64 block of 1 MiB stays in the CPU's cache)
_BLOCK = 1 << 17


def _flat_pair(acc: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """1-d views of ``acc`` and ``x`` in which equal positions hold equal elements (None: the
    layouts differ)."""
    if acc.flags.c_contiguous and x.flags.c_contiguous:
        return acc.reshape(-1), x.reshape(-1)
    if acc.flags.f_contiguous and x.flags.f_contiguous:
        return acc.T.reshape(-1), x.T.reshape(-1)
    return None


class _Accumulator:
    """``acc = p_0 x_0``, then ``acc += p_i x_i``, each product rounded to its array's dtype first
    (``aggregate_inplace``'s arithmetic), through scratch buffers reused for every client.

    NumPy computes ``np.multiply(x, p, out=y)`` for a ``float32`` ``x`` and a ``float64`` ``p`` in
    ``float64`` (NEP 50 promotion), casting ``x`` up and the product back down in small internal
    buffers. The fast path makes the same three steps explicit, a block at a time: widen the block
    (exact), multiply in ``float64``, round to ``float32``; the same numbers, in about two thirds
    of the time. Anything else (integers, layouts that differ, mixed dtypes) takes
    ``np.multiply`` / ``np.add`` directly.
    """

    def __init__(self) -> None:
        self._buffers: dict[np.dtype, np.ndarray] = {}

    def _buffer(self, dtype: np.dtype, n: int) -> np.ndarray:
        buf = self._buffers.get(dtype)
        if buf is None or buf.size < n:  # grows to the largest block of this dtype
            buf = self._buffers[dtype] = np.empty(n, dtype=dtype)
        return buf[:n]

    def start(self, x: np.ndarray, p: np.float64) -> np.ndarray:
        """A new accumulator holding ``p x`` (in ``x``'s dtype and layout)."""
        acc = np.empty_like(x)
        if not self._widened(acc, x, p, add=False):
            _into(np.multiply, acc, x, p)
        return acc

    def add(self, acc: np.ndarray, x: np.ndarray, p: np.float64) -> None:
        """``acc += p x``."""
        if acc.dtype == x.dtype and self._widened(acc, x, p, add=True):
            return
        _into(np.add, acc, acc, _into(np.multiply, self._buffer(x.dtype, x.size).reshape(x.shape), x, p))

    def _widened(self, acc: np.ndarray, x: np.ndarray, p: np.float64, add: bool) -> bool:
        wide = np.result_type(x.dtype, p)  # the dtype np.multiply(x, p) computes in
        if x.dtype.kind != "f" or wide.kind != "f" or wide.itemsize <= x.dtype.itemsize or x.size == 0:
            return False
        pair = _flat_pair(acc, x)
        if pair is None:
            return False
        af, xf = pair
        n = xf.size
        for b0 in range(0, n, _BLOCK):
            b1 = min(n, b0 + _BLOCK)
            w = self._buffer(wide, b1 - b0)
            np.copyto(w, xf[b0:b1])  # exact
            np.multiply(w, p, out=w)  # the product np.multiply(x, p) computes
            if add:
                y = self._buffer(x.dtype, b1 - b0)
                np.copyto(y, w, casting="same_kind")  # rounded to x's dtype, as np.multiply(..., out=y) rounds
                a = af[b0:b1]
                np.add(a, y, out=a)
            else:
                np.copyto(af[b0:b1], w, casting="same_kind")
        return True


def _stream(models: Iterable[Sequence[np.ndarray]], factors: np.ndarray, what: str) -> list[np.ndarray]:
    """``sum_i factors[i] * models[i]`` per array, one model at a time (see :func:`weighted_average`)."""
    if len(factors) == 0:
        raise ValueError("no client models to average")
    out: list[np.ndarray] = []
    acc = _Accumulator()
    count = 0
    for model in models:  # (not enumerate: its reused result tuple would keep the last model alive)
        i = count
        if i >= len(factors):
            raise ValueError(f"more than {len(factors)} models for {len(factors)} {what}")
        arrays = [np.asarray(x) for x in model]
        if i == 0:
            out = [acc.start(x, factors[0]) for x in arrays]
        elif len(arrays) != len(out):
            raise ValueError(f"client {i} sent {len(arrays)} arrays, expected {len(out)}")
        else:
            for a, x in zip(out, arrays):
                acc.add(a, x, factors[i])
        count = i + 1
        del model, arrays  # let the next client's model take this one's place
    if count != len(factors):
        raise ValueError(f"{count} models but {len(factors)} {what}")
    return out


def aggregation_weights(num_examples: Sequence[int], weighting: str = "num_examples") -> np.ndarray:
    """Return the aggregation weights ``p_i`` (float64, summing to 1).

    ``weighting="num_examples"`` (default): ``p_i = n_i / sum_j n_j``; a client with ``n_i = 0``
    gets weight 0. ``"uniform"``: ``p_i = 1/S``.

    Raises ``ValueError`` for an unknown weighting, no clients, a negative or non-finite count, or
    all counts zero (the counts need a positive sum).
    """
    check_choice("weighting", weighting, WEIGHTINGS)
    counts = np.asarray(list(num_examples), dtype=np.float64)
    if counts.size == 0:
        raise ValueError("no client results to aggregate")
    if weighting == "uniform":
        return np.full(counts.size, 1.0 / counts.size)
    if np.any(counts < 0) or not np.all(np.isfinite(counts)):
        raise ValueError(f"num_examples must be finite and >= 0, got {list(num_examples)}")
    total = counts.sum()
    if total <= 0:
        raise ValueError("all clients reported num_examples = 0: nothing to aggregate (the counts need a positive sum)")
    return counts / total


def weighted_average(models: Iterable[Sequence[np.ndarray]], weights: Sequence[float]) -> list[np.ndarray]:
    """``sum_i p_i w_i`` per array, with exactly the arithmetic of Flower's legacy
    ``aggregate_inplace`` (FedAvg's default): each array is scaled in its own dtype (so an integer
    buffer such as BatchNorm's ``num_batches_tracked`` is scaled by a factor cast to an integer),
    and the scaled arrays are summed in client order. Inputs are not modified.

    It streams, as Flower's does: ``models`` may be any iterable (a generator that decodes each
    client's arrays only when asked), and each model is scaled and added before the next one is
    taken, so nothing of model size is held besides the sum, the model being added and scratch
    buffers (at most the largest array per dtype), reused for every client. Reusing warm memory
    instead of a fresh buffer per product is also what makes it fast.

    Raises ``ValueError`` for no models or mismatched counts of models, weights or arrays.
    """
    return _stream(models, np.asarray([float(w) for w in weights]), "weights")


def fedavg_average(models: Iterable[Sequence[np.ndarray]], num_examples: Sequence[int]) -> list[np.ndarray]:
    """FedAvg's example-weighted average: :func:`weighted_average` with ``p_i = n_i / sum_j n_j``.

    The weights come first (``n_i / sum_j n_j`` needs every count before the first model is
    scaled); ``models`` may be any iterable, consumed one model at a time.

    Raises ``ValueError`` for no models, mismatched counts or a zero total of examples.
    """
    total = sum(int(n) for n in num_examples)
    if len(num_examples) and total <= 0:
        raise ValueError("all clients reported num_examples = 0: nothing to average")
    return _stream(models, np.asarray([int(n) / total for n in num_examples]), "example counts")


def weighted_mean_metrics(results: Sequence[tuple[float, Mapping[str, Any]]],
                          skip: frozenset[str] = SKIP_KEYS) -> dict[str, float]:
    """Example-weighted mean of every numeric metric (the keys in ``skip`` excluded: by default
    ``partition-id`` and ``num-examples``); a metric only some clients report is averaged over them."""
    total = sum(n for n, _ in results)
    if total == 0:
        return {}
    keys = sorted({k for _, m in results for k, v in m.items() if k not in skip and is_real(v)})
    out: dict[str, float] = {}
    for key in keys:
        pairs = [(n, float(m[key])) for n, m in results if key in m]
        weight = sum(n for n, _ in pairs)
        if weight:
            out[key] = sum(n * v for n, v in pairs) / weight
    return out
