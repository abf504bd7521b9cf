"""Tampered replies to every registered method's server core (issue 13, done-when 3).

For each method, one real round is configured and every sampled client really trains (the
method's own client), then one reply is tampered with. Under ``on_bad_reply="drop"`` the round
must equal the same round run without that reply (the bad one is counted in ``rejected`` and
never touches the state); with every reply tampered the method's state stays exactly as it was;
under ``"raise"`` a ``ReplyError`` naming the partition comes before any state change.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.common import Context, RecordDict

from flwr_strategies.core import Reply, ReplyError
from flwr_strategies.registry import list_methods
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment

NUM_CLIENTS = 4


def _methods() -> list[str]:
    return [name for name, spec in list_methods().items() if spec.build_core is not None]


def _core(exp):
    """A fresh core, at the point where round 1's replies are expected."""
    core = exp.spec.build_core(exp.server_setup(), dict(exp.params))
    sampled = core.select(1, range(NUM_CLIENTS))
    return core, sampled, core.configure_train(1, sampled)


def _setup(method: str):
    # client_seed: the DO-ADP family's clients draw their noise and activation coins from their own
    # secret; a fixed one keeps this test's replies the same on every run
    cfg = ExperimentConfig(method=method, num_clients=NUM_CLIENTS, rounds=2, seed=0, progress=False, client_seed=7)
    exp = get_experiment(cfg)
    core, sampled, instructions = _core(exp)
    replies = []
    model = exp.model_fn()
    for ins in instructions:
        ctx = Context(run_id=0, node_id=ins.partition_id, state=RecordDict(), run_config={},
                      node_config={"partition-id": ins.partition_id, "num-partitions": NUM_CLIENTS})
        client = exp.build_client(ctx, model)
        arrays, n, metrics = client.fit([np.array(a, copy=True) for a in ins.arrays],
                                        {**ins.config, "partition-id": ins.partition_id})
        replies.append(Reply(ins.partition_id, [np.asarray(a) for a in arrays], n, dict(metrics)))
    # the tampered reply goes last; it must carry a float array (an inactive DO-ADP agent sends none)
    j = max(i for i, r in enumerate(replies) if any(a.dtype.kind == "f" and a.size for a in r.arrays))
    replies.append(replies.pop(j))
    return (lambda: _core(exp)[0]), sampled, replies


def _first_float(arrays):
    for j, a in enumerate(arrays):
        if a.dtype.kind == "f" and a.size:
            return j
    raise AssertionError("no floating array in the reply")


def _tamper(kind: str, reply: Reply, sampled: list[int]) -> Reply:
    r = Reply(reply.partition_id, [a.copy() for a in reply.arrays], reply.num_examples, dict(reply.metrics))
    if kind == "wrong_shape":
        j = _first_float(r.arrays)
        r.arrays[j] = np.zeros((1, 1), dtype=r.arrays[j].dtype)
    elif kind == "nan":
        j = _first_float(r.arrays)
        r.arrays[j] = r.arrays[j].copy()
        r.arrays[j].flat[0] = np.nan
    elif kind == "inf":
        j = _first_float(r.arrays)
        r.arrays[j] = r.arrays[j].copy()
        r.arrays[j].flat[-1] = np.inf
    elif kind == "extra_array":
        r.arrays.append(np.ones(3, dtype=np.float32))
    elif kind == "missing_array":
        r.arrays = r.arrays[:-1] if len(r.arrays) > 1 else [np.ones(7, dtype=np.float32), np.ones(7, dtype=np.float32)]
    elif kind == "negative_partition":
        r.partition_id = -1
    elif kind == "partition_out_of_range":
        r.partition_id = NUM_CLIENTS + 5
    elif kind == "unsampled_partition":
        others = [p for p in range(NUM_CLIENTS) if p not in sampled]
        r.partition_id = others[0] if others else NUM_CLIENTS + 1
    elif kind == "negative_examples":
        r.num_examples = -3
    elif kind == "float_dtype_as_int":
        j = _first_float(r.arrays)
        r.arrays[j] = r.arrays[j].astype(np.int64)
    else:  # pragma: no cover
        raise KeyError(kind)
    return r


KINDS = ["wrong_shape", "nan", "inf", "extra_array", "missing_array", "negative_partition",
         "partition_out_of_range", "unsampled_partition", "negative_examples", "float_dtype_as_int"]


def _method_state(core) -> dict:
    return core.state_dict()["method"]


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    return a == b


@pytest.mark.parametrize("method", _methods())
def test_tampered_replies_are_rejected_before_any_state_change(method):
    fresh, sampled, replies = _setup(method)
    for kind in KINDS:
        # one bad reply among good ones: same as the round without it
        bad = [*replies[:-1], _tamper(kind, replies[-1], sampled)]
        expected, actual = fresh(), fresh()
        ref = expected.train_round(1, replies[:-1], sampled=sampled, failed=[replies[-1].partition_id])
        got = actual.train_round(1, bad, sampled=sampled)
        assert got["rejected"] == 1, (method, kind, dict(got))
        assert _equal(_method_state(actual), _method_state(expected)), (method, kind)
        for key in ("failures",):
            assert got[key] == ref[key], (method, kind, key)
        # every reply bad: the method's state is exactly as before
        untouched = fresh()
        before = _method_state(untouched)
        res = untouched.train_round(1, [_tamper(kind, r, sampled) for r in replies], sampled=sampled)
        assert res["rejected"] == len(replies), (method, kind)
        assert _equal(_method_state(untouched), before), (method, kind)
        # "raise": an error naming the partition, nothing changed
        strict = fresh()
        full = strict.state_dict()
        with pytest.raises(ReplyError, match="partition|a client"):
            strict.train_round(1, bad, sampled=sampled, on_bad_reply="raise")
        assert _equal(strict.state_dict(), full), (method, kind)


@pytest.mark.parametrize("method", _methods())
def test_duplicate_reply_is_rejected(method):
    fresh, sampled, replies = _setup(method)
    dup = [*replies, replies[0]]
    expected, actual = fresh(), fresh()
    expected.train_round(1, replies, sampled=sampled)
    got = actual.train_round(1, dup, sampled=sampled)
    assert got["rejected"] == 1
    assert _equal(_method_state(actual), _method_state(expected))
