"""The ``.npy`` payloads read without copies and written with one (``adapters.wire``): the same
arrays as Flower's ``np.load`` decoders, the same bytes as its ``np.save`` encoders, and replies
that reach the cores as read-only views of the messages' bytes in both adapters."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common import Code, FitRes, Status, bytes_to_ndarray, ndarray_to_bytes, ndarrays_to_parameters

from flwr_strategies.adapters.wire import npy_bytes, npy_view

_rng = np.random.default_rng(0)
ARRAYS = {
    "0-d float32": np.array(3.5, np.float32),
    "0-d int64": np.array(-5, np.int64),
    "C float32": _rng.standard_normal((3, 4)).astype(np.float32),
    "Fortran float64": np.asfortranarray(_rng.standard_normal((3, 4))),
    "strided view": _rng.standard_normal((4, 6))[::2, 1::2],
    "empty": np.zeros((0, 3), np.float32),
    "empty Fortran": np.asfortranarray(np.zeros((2, 0, 3))),
    "bool": np.array([True, False, True]),
    "big-endian": _rng.standard_normal(5).astype(">f4"),
    "complex64": (_rng.standard_normal(4) + 1j).astype(np.complex64),
    "float16": np.arange(6, dtype=np.float16).reshape(2, 3),
    "uint8 3-d": _rng.integers(0, 255, (2, 3, 4)).astype(np.uint8),
    "strings": np.array(["ab", "c"]),
    "records": np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")]),
}


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_bytes_are_numpys_and_views_are_what_np_load_gives(name):
    a = ARRAYS[name]
    data = npy_bytes(a)
    assert data == ndarray_to_bytes(a) == Array(np.asarray(a)).data
    expected = bytes_to_ndarray(data)
    for payload in (data, bytearray(data), memoryview(data)):
        v = npy_view(payload)
        assert v.dtype == expected.dtype and v.shape == expected.shape
        assert v.flags.c_contiguous == expected.flags.c_contiguous and v.flags.f_contiguous == expected.flags.f_contiguous
        assert np.array_equal(v, expected)
        assert not v.flags.writeable  # a core cannot change a reply in place


def test_a_view_copies_nothing():
    blobs = [ndarray_to_bytes(np.full(100_000, i, np.float32)) for i in range(20)]
    tracemalloc.start()
    try:
        views = [npy_view(b) for b in blobs]
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 20 * 1024, held  # small objects only, no 400 kB array
    assert all(float(v[7]) == i for i, v in enumerate(views))
    assert np.shares_memory(views[3], np.frombuffer(blobs[3], np.uint8))


@pytest.mark.parametrize("payload, match", [
    (b"", "no NUMPY magic"),
    (b"\x93NUMPY\x01\x00", "truncated"),
    (ndarray_to_bytes(np.zeros(10))[:-1], "bytes of data"),
    (b"PK\x03\x04" + b"x" * 20, "no NUMPY magic"),  # an .npz archive
    (b"\x93NUMPY\x01\x00\x05\x00{'a'}", "not a dictionary"),
])
def test_malformed_payloads_are_refused(payload, match):
    with pytest.raises(ValueError, match=match):
        npy_view(payload)


def test_legacy_replies_reach_the_core_as_views_of_the_fitres_bytes():
    from flwr_strategies.adapters.legacy import _decode

    arrays = [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([1, 2], np.int64)]
    res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 7, {"partition-id": 3})
    reply = _decode(3, res)
    assert reply.num_examples == 7 and reply.partition_id == 3
    for got, want, blob in zip(reply.arrays, arrays, res.parameters.tensors):
        assert np.array_equal(got, want) and got.dtype == want.dtype and not got.flags.writeable
        assert np.shares_memory(got, np.frombuffer(blob, np.uint8))
    res.parameters.tensors[1] = b"not an array"
    assert "could not be decoded" in _decode(3, res).reason


def test_message_replies_reach_the_core_as_views_of_the_array_bytes():
    from flwr.clientapp import ClientApp

    from flwr_strategies.clients.app import partition_query
    from flwr_strategies.serverapp import FedAvg
    from flwr_strategies.simulations.inprocess_grid import InProcessGrid

    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float32)}
    app = ClientApp()
    app.query("partition")(partition_query)

    @app.train()
    def train(msg, context):
        record = ArrayRecord({k: Array(v) for k, v in arrays.items()})
        return Message(RecordDict({"arrays": record, "metrics": MetricRecord({"num-examples": 4})}), reply_to=msg)

    grid = InProcessGrid(app, 2)
    strategy = FedAvg(fraction_evaluate=0.0)
    initial = ArrayRecord({k: Array(np.zeros_like(v)) for k, v in arrays.items()})
    replies = list(grid.send_and_receive(strategy.configure_train(1, initial, ConfigRecord(), grid)))
    decoded = strategy._decode(1, replies[0])
    record = replies[0].content.array_records["arrays"]
    assert decoded.num_examples == 4
    for got, (key, want) in zip(decoded.arrays, arrays.items()):
        assert np.array_equal(got, want) and not got.flags.writeable
        assert np.shares_memory(got, np.frombuffer(record[key].data, np.uint8))
    record["b"] = Array(dtype="float32", shape=(3,), stype="torch.Tensor", data=b"x")
    assert "Unsupported serialization type" in strategy._decode(1, replies[0]).reason
