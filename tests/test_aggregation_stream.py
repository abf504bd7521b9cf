"""The streaming weighted average (``fedavg_average_stream``): bit-identical to ``fedavg_average``
(and so to Flower's legacy ``aggregate_inplace``), one client model at a time, in bounded memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
from flwr.server.strategy.aggregate import aggregate_inplace

from flwr_strategies.core.aggregation import fedavg_average, fedavg_average_stream


def _models(clients: int, seed: int, dtypes=(np.float32, np.float64, np.int64, np.float16)) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    shapes = [(7, 5), (3,), (), (4, 2, 3)]
    out = []
    for _ in range(clients):
        model = []
        for shape, dtype in zip(shapes, dtypes):
            if np.dtype(dtype).kind == "i":  # a BatchNorm num_batches_tracked-like counter
                model.append(rng.integers(0, 1000, size=shape).astype(dtype))
            else:
                model.append((rng.standard_normal(shape) * 10 ** rng.uniform(-3, 3)).astype(dtype))
        out.append(model)
    return out


def _assert_identical(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y), np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))


@pytest.mark.parametrize("seed", range(5))
def test_stream_is_bit_identical_to_fedavg_average(seed):
    models = _models(9, seed)
    counts = list(np.random.default_rng(100 + seed).integers(0, 500, size=9))
    counts[0] = max(counts[0], 1)
    copies = [[a.copy() for a in m] for m in models]
    expected = fedavg_average(models, counts)
    _assert_identical(fedavg_average_stream(counts, models), expected)
    _assert_identical(fedavg_average_stream(counts, (m for m in models)), expected)  # a generator
    for m, c in zip(models, copies):  # inputs not modified
        _assert_identical(m, c)


def test_stream_matches_flowers_aggregate_inplace_and_mixed_dtypes():
    models = _models(6, 7, dtypes=(np.float32,) * 4)
    counts = [10, 30, 60, 5, 1, 200]
    flower = aggregate_inplace([(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(m), n, {}))
                                for m, n in zip(models, counts)])
    _assert_identical(fedavg_average_stream(counts, models), flower)
    # a client whose arrays come in another dtype than the first client's: cast like fedavg_average
    mixed = [[a.astype(np.float64) if i % 2 else a for a in m] for i, m in enumerate(models)]
    _assert_identical(fedavg_average_stream(counts, mixed), fedavg_average(mixed, counts))


def test_stream_refuses_what_fedavg_average_refuses():
    models = _models(3, 0)
    with pytest.raises(ValueError, match="no client models"):
        fedavg_average_stream([], [])
    with pytest.raises(ValueError, match="num_examples = 0"):
        fedavg_average_stream([0, 0, 0], models)
    with pytest.raises(ValueError, match="2 models but 3 example counts"):
        fedavg_average_stream([1, 2, 3], models[:2])
    with pytest.raises(ValueError, match="more than 2 models"):
        fedavg_average_stream([1, 2], models)
    with pytest.raises(ValueError, match="client 1 sent 3 arrays, expected 4"):
        fedavg_average_stream([1, 2, 3], [models[0], models[1][:3], models[2]])


def test_stream_holds_one_model_besides_the_sum():
    """40 clients of a 1 MB model, each decoded only when the average asks for it: the call's peak
    allocation is the sum, the scratch buffer and the one model being added (3 models at most),
    where ``fedavg_average`` over the decoded list holds all 40."""
    clients, sizes = 40, [150_000, 90_000, 10_000, 10]
    model_bytes = sum(sizes) * 4
    counts = list(range(1, clients + 1))

    def decoded():
        rng = np.random.default_rng(0)
        for _ in range(clients):
            yield [rng.standard_normal(n, dtype=np.float32) for n in sizes]

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        streamed = fedavg_average_stream(counts, decoded())
        stream_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        listed = fedavg_average(list(decoded()), counts)
        list_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    _assert_identical(streamed, listed)
    assert stream_peak < 3 * model_bytes + 64 * 1024, stream_peak / model_bytes
    assert list_peak > clients * model_bytes, list_peak / model_bytes
