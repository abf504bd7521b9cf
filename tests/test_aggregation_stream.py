"""The weighted average streams (``fedavg_average`` over any iterable): bit-identical to Flower's
legacy ``aggregate_inplace`` arithmetic (each product in its array's dtype, then summed in client
order), one client model at a time, in bounded memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
from flwr.server.strategy.aggregate import aggregate_inplace

from flwr_strategies.core.aggregation import _BLOCK, fedavg_average, weighted_average


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


def _reference(models: list[list[np.ndarray]], counts: list[int]) -> list[np.ndarray]:
    """``aggregate_inplace``'s arithmetic written out: a fresh buffer for every product."""
    total = sum(int(n) for n in counts)
    factors = np.asarray([int(n) / total for n in counts])

    def scaled(x, s):
        out = np.empty_like(x)
        return np.multiply(x, s, out=out) if np.can_cast(s, x.dtype, casting="same_kind") else \
            np.multiply(x, np.array(s, x.dtype), out=out)

    acc = [scaled(x, factors[0]) for x in models[0]]
    for i, model in enumerate(models[1:], start=1):
        for a, x in zip(acc, model):
            y = scaled(x, factors[i])
            np.add(a, y, out=a) if np.can_cast(y, a.dtype, casting="same_kind") else np.add(a, np.array(y, a.dtype), out=a)
    return acc


def _assert_identical(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y), np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))


@pytest.mark.parametrize("seed", range(5))
def test_stream_is_bit_identical_to_the_list_arithmetic(seed):
    models = _models(9, seed)
    counts = list(np.random.default_rng(100 + seed).integers(0, 500, size=9))
    counts[0] = max(counts[0], 1)
    copies = [[a.copy() for a in m] for m in models]
    expected = _reference(models, counts)
    _assert_identical(fedavg_average(models, counts), expected)
    _assert_identical(fedavg_average((m for m in models), counts), expected)  # a generator
    total = sum(int(n) for n in counts)
    _assert_identical(weighted_average(iter(models), [int(n) / total for n in counts]), expected)
    for m, c in zip(models, copies):  # inputs not modified
        _assert_identical(m, c)


def test_stream_matches_flowers_aggregate_inplace_and_mixed_dtypes():
    models = _models(6, 7, dtypes=(np.float32,) * 4)
    counts = [10, 30, 60, 5, 1, 200]
    flower = aggregate_inplace([(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(m), n, {}))
                                for m, n in zip(models, counts)])
    _assert_identical(fedavg_average(models, counts), flower)
    # read-only views (what the adapters decode replies into) give the same numbers
    views = [[np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape) for a in m] for m in models]
    _assert_identical(fedavg_average(views, counts), flower)
    # a client whose arrays come in another dtype than the first client's: cast like aggregate_inplace
    mixed = [[a.astype(np.float64) if i % 2 else a for a in m] for i, m in enumerate(models)]
    _assert_identical(fedavg_average(mixed, counts), _reference(mixed, counts))


def test_stream_refuses_mismatched_inputs():
    models = _models(3, 0)
    with pytest.raises(ValueError, match="no client models"):
        fedavg_average([], [])
    with pytest.raises(ValueError, match="num_examples = 0"):
        fedavg_average(models, [0, 0, 0])
    with pytest.raises(ValueError, match="2 models but 3 example counts"):
        fedavg_average(iter(models[:2]), [1, 2, 3])
    with pytest.raises(ValueError, match="more than 2 models for 2 example counts"):
        fedavg_average(iter(models), [1, 2])
    with pytest.raises(ValueError, match="client 1 sent 3 arrays, expected 4"):
        fedavg_average([models[0], models[1][:3], models[2]], [1, 2, 3])
    with pytest.raises(ValueError, match="1 models but 2 weights"):
        weighted_average(models[:1], [0.5, 0.5])


def test_stream_holds_one_model_besides_the_sum():
    """12 clients of a 4 MB model, each decoded only when the average asks for it: the call's peak
    allocation is the sum, the one model being added and the scratch blocks (a fixed size, at most
    ``_BLOCK`` float64 and float32 values), where an average over the decoded list holds all 12."""
    clients, sizes = 12, [600_000, 300_000, 99_990, 10]
    model_bytes = sum(sizes) * 4
    counts = list(range(1, clients + 1))
    scratch = _BLOCK * (8 + 4)

    def decoded():
        rng = np.random.default_rng(0)
        for _ in range(clients):
            yield [rng.standard_normal(n, dtype=np.float32) for n in sizes]

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        streamed = fedavg_average(decoded(), counts)
        stream_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        listed = list(decoded())
        list_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    _assert_identical(streamed, _reference(listed, counts))
    assert stream_peak < 2 * model_bytes + scratch + 64 * 1024, stream_peak / model_bytes
    assert list_peak > clients * model_bytes, list_peak / model_bytes


def test_blocks_of_a_large_array_give_the_same_numbers():
    """An array longer than one block, in C and Fortran order, and float16: the blocked float64
    products equal ``np.multiply``'s own."""
    rng = np.random.default_rng(3)
    big = [[rng.standard_normal(2 * _BLOCK + 17).astype(np.float32),
            np.asfortranarray(rng.standard_normal((300, 500)).astype(np.float32)),
            rng.standard_normal((7, 9)).astype(np.float16)] for _ in range(4)]
    counts = [3, 1, 4, 1]
    _assert_identical(fedavg_average(big, counts), _reference(big, counts))
    # a client whose array is in another layout than the first client's
    mixed = [[a if i != 2 else np.ascontiguousarray(a) for a in m] for i, m in enumerate(big)]
    _assert_identical(fedavg_average(mixed, counts), _reference(mixed, counts))
