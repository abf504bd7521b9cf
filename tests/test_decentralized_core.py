"""The framework-neutral decentralized core: per-peer start points, mixing, failures, metrics,
checkpoints, graph settings and the memory floor (no table-sized temporaries in a round)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from flwr_strategies.core.messages import Reply
from flwr_strategies.core.validation import ReplyError
from flwr_strategies.decentralized import Topology, mix, mixing_matrix, restrict_to_alive
from flwr_strategies.decentralized import mixing as mixing_module
from flwr_strategies.decentralized.config import GraphConfig
from flwr_strategies.decentralized.server import GossipCore
from flwr_strategies.dfedcata.config import DFedCataConfig
from flwr_strategies.dfedcata.server import DFedCataServer, DPSGDServer

M = 6


def _core(cls=GossipCore, m=M, init=None, **kw):
    init = [np.zeros((2, 2), np.float32)] if init is None else init
    kw.setdefault("graph", GraphConfig(neighbours=4))
    return cls(init, num_partitions=m, seed=0, on_train_config=lambda r: {"lr": 0.1}, **kw)


def _round(core, r, update, skip=(), policy="raise"):
    ins = core.configure_train(r, core.select(r, range(core.num_partitions)))
    replies = [Reply(i.partition_id, [update(i.partition_id, a.copy()) for a in i.arrays], 10, {"train_loss": 1.0})
               for i in ins if i.partition_id not in skip]
    return ins, core.train_round(r, replies, sampled=[i.partition_id for i in ins], on_bad_reply=policy)


def test_each_peer_gets_its_own_model_and_mixing_matches():
    core = _core()
    ins, metrics = _round(core, 1, lambda pid, a: a + (pid + 1))
    assert [i.partition_id for i in ins] == list(range(M))
    Y = np.stack([np.full(4, i + 1.0, dtype=np.float32) for i in range(M)])
    W = mixing_matrix(Topology("random", M, seed=0, neighbours=4).graph(0))
    np.testing.assert_array_equal(core.models.data, mix(W, Y))
    np.testing.assert_allclose(np.concatenate([a.ravel() for a in core.global_arrays()]), mix(W, Y).mean(axis=0), rtol=1e-6)
    for key in ("consensus_distance", "failures", "links", "p2p_bytes", "spectral_gap", "train_loss", "connected"):
        assert key in metrics
    assert metrics["failures"] == 0 and metrics["links"] == W.nnz - M
    ins2 = core.configure_train(2, list(range(M)))
    sent = np.stack([np.concatenate([a.ravel() for a in i.arrays]) for i in ins2])
    np.testing.assert_array_equal(sent, core.models.data)
    assert len({tuple(r) for r in sent}) > 1


def test_start_points_are_views_of_the_spare_table():
    core = _core()
    ins = core.configure_train(1, list(range(M)))
    for i in ins:
        assert all(np.shares_memory(a, core.spare[i.partition_id]) for a in i.arrays)


def test_failed_peer_keeps_previous_model_neighbours_renormalise():
    core = _core()
    _round(core, 1, lambda pid, a: a + pid)
    X1 = core.models.data.copy()
    _, metrics = _round(core, 2, lambda pid, a: a + 10.0, skip=(3,))
    assert metrics["failures"] == 1
    np.testing.assert_array_equal(core.models.data[3], X1[3])
    alive = np.ones(M, dtype=bool)
    alive[3] = False
    Y = X1 + 10.0
    Y[3] = X1[3]
    W = restrict_to_alive(mixing_matrix(Topology("random", M, seed=0, neighbours=4).graph(1)), alive)
    np.testing.assert_array_equal(core.models.data, mix(W, Y))


def test_a_round_without_replies_changes_nothing():
    core = _core(DFedCataServer, config=DFedCataConfig(beta=0.9))
    _round(core, 1, lambda pid, a: a + pid)
    before = core.state_dict()["method"]
    _, metrics = _round(core, 2, lambda pid, a: a, skip=tuple(range(M)))
    after = core.state_dict()["method"]
    assert metrics["failures"] == M and metrics["links"] == 0
    for key in before:
        np.testing.assert_array_equal(before[key], after[key])


def test_evaluate_reports_average_consensus_and_peer_accuracy():
    calls = []

    def evaluate_fn(rnd, arrays):
        v = float(arrays[0].mean())
        calls.append(v)
        return -v, {"accuracy": v}

    core = _core()
    _round(core, 1, lambda pid, a: a + pid)
    loss, metrics = core.evaluate(1, evaluate_fn)
    X = core.models.data
    assert metrics["accuracy"] == pytest.approx(X.mean())
    assert metrics["client_accuracy_mean"] == pytest.approx(X.mean(axis=1).mean())
    assert metrics["client_accuracy_min"] == pytest.approx(X.mean(axis=1).min())
    assert metrics["consensus_distance"] == pytest.approx(((X - X.mean(axis=0)) ** 2).sum(axis=1).mean())
    assert len(calls) == 1 + M
    few = _core(graph=GraphConfig(neighbours=4, client_eval_every=2, client_eval_max=2))
    calls.clear()
    few.evaluate(1, evaluate_fn)
    assert len(calls) == 1  # round 1 is not a multiple of 2
    few.evaluate(2, evaluate_fn)
    assert len(calls) == 1 + 1 + 2


def test_disconnected_round_accepted_only_for_time_varying_graphs():
    from flwr_strategies.decentralized import MixingError, is_connected

    top = Topology("random", 6, seed=1, neighbours=4)
    assert not is_connected(top.graph(1))
    core = _core(topology=top)
    assert core.allow_disconnected
    core.mixing_matrix(2)
    strict = _core(topology=top, graph=GraphConfig(neighbours=4, allow_disconnected=False))
    with pytest.raises(MixingError, match="disconnected"):
        strict.mixing_matrix(2)
    with pytest.raises(MixingError, match="disconnected"):  # a static graph is checked at construction
        _core(topology=Topology("watts_strogatz", 10, seed=0, k=2, p=1.0),
              graph=GraphConfig(topology="watts_strogatz", ws_k=2, topology_p=1.0), m=10)


def test_checkpoint_round_trip_restores_every_table():
    a = _core(DFedCataServer, config=DFedCataConfig(beta=0.9))
    for r in (1, 2):
        _round(a, r, lambda pid, x: x * 0.5 + pid)
    state = a.state_dict()
    b = _core(DFedCataServer, config=DFedCataConfig(beta=0.9))
    b.load_state_dict(state)
    for r in (3, 4):
        _round(a, r, lambda pid, x: x * 0.5 + pid)
        _round(b, r, lambda pid, x: x * 0.5 + pid)
    np.testing.assert_array_equal(a.models.data, b.models.data)
    np.testing.assert_array_equal(a.anchors, b.anchors)
    bad = dict(state, method={"models": state["method"]["models"][:2]})
    with pytest.raises(ValueError, match="checkpoint"):
        b.load_state_dict(bad)


def test_fraction_below_one_and_too_few_peers_are_rejected():
    with pytest.raises(ValueError, match="fraction_fit"):
        _core(fraction_train=0.5)
    with pytest.raises(ValueError, match="at least 2 peers|>= 2 peers"):
        _core(m=1)


def test_replies_that_share_the_spare_row_are_not_copied():
    # an in-process driver may let the peer write its result straight into the table row
    core = _core()
    ins = core.configure_train(1, list(range(M)))
    for i in ins:
        for a in i.arrays:
            a += i.partition_id  # in place, in the spare row
    core.train_round(1, [Reply(i.partition_id, i.arrays, 1, {}) for i in ins], sampled=range(M), on_bad_reply="raise")
    W = mixing_matrix(Topology("random", M, seed=0, neighbours=4).graph(0))
    np.testing.assert_array_equal(core.models.data, mix(W, np.repeat(np.arange(M, dtype=np.float32)[:, None], 4, 1)))


@pytest.mark.parametrize("cls", [GossipCore, DFedCataServer, DPSGDServer])
def test_a_round_allocates_no_table_sized_temporary(monkeypatch, cls):
    # issue 15: state at the floor; start points and replies live in the preallocated spare table,
    # mixing runs in place through a column-block buffer. Replies (messages in flight) are built first.
    monkeypatch.setattr(mixing_module, "INPLACE_BLOCK_BYTES", 1 << 20)
    m, d = 8, 1 << 20  # one table = 32 MiB
    init = [np.zeros(d, np.float32)]
    kw = {"config": DFedCataConfig(beta=0.9)} if cls is DFedCataServer else {}
    core = cls(init, num_partitions=m, graph=GraphConfig(neighbours=4), seed=0,
               on_train_config=lambda r: {"lr": 0.1}, **kw)
    table = core.models.data.nbytes
    replies = [Reply(i, [np.full(d, float(i), np.float32)], 1, {}) for i in range(m)]
    core.train_round(1, replies, sampled=range(m), on_bad_reply="raise")
    tracemalloc.start()
    tracemalloc.reset_peak()
    ins = core.configure_train(2, list(range(m)))
    del ins
    core.train_round(2, replies, sampled=range(m), on_bad_reply="raise")
    core.global_arrays()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # row-sized work (x_bar in float64, one row buffer) and the consensus chunks only: < 0.5 table
    assert peak < 0.5 * table, f"peak {peak / table:.2f} tables"


def test_bad_reply_from_negative_partition_never_overwrites_a_peer():
    core = _core()
    core.configure_train(1, list(range(M)))
    good = [Reply(i, [np.full((2, 2), float(i), np.float32)], 1, {}) for i in range(M - 1)]
    evil = Reply(-1, [np.full((2, 2), 99.0, np.float32)], 1, {})
    with pytest.raises(ReplyError, match="outside"):
        core.train_round(1, good + [evil], sampled=range(M), on_bad_reply="raise")
    result = core.train_round(1, good + [evil], sampled=range(M), on_bad_reply="drop")
    assert result["rejected"] == 1
    assert not (core.models.data == 99.0).any()
    assert (core.models.data[M - 1] == 0).all() or result["failures"] >= 1
