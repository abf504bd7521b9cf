"""The gossip cores hold no spare table while a round's replies are in flight: the spare that holds
the start points is released once the instructions are serialized (``instructions_sent``), the
replies are written into a table the step no longer needs (DFedAvg: the mixed models; DFedCata with
"prev_mixed" anchors: the old anchors' table) and mixed in place there. The numbers are those of
the in-place mix of the spare table it replaces, failed peers included."""

from __future__ import annotations

import numpy as np
import pytest

from flwr_strategies.core.messages import Reply
from flwr_strategies.decentralized import mix
from flwr_strategies.decentralized.config import GraphConfig
from flwr_strategies.decentralized.server import GossipCore
from flwr_strategies.dfedcata.config import DFedCataConfig
from flwr_strategies.dfedcata.server import DFedCataServer, DPSGDServer

M, D = 7, 300


def _core(cls, **cfg):
    kw = {"config": DFedCataConfig(**cfg)} if cls is DFedCataServer else {}
    init = [np.linspace(-1, 1, D - 12, dtype=np.float32).reshape(-1, 2), np.ones(12, np.float32)]
    return cls(init, num_partitions=M, graph=GraphConfig(neighbours=3), seed=0,
               on_train_config=lambda r: {"lr": 0.1}, **kw)


def _step(pid, r, arrays):
    """A peer's local step: a contraction towards its own point, different every round."""
    return [(0.9 * a + 0.1 * np.float32(pid - r)).astype(a.dtype) for a in arrays]


def _round(core, r, dead=(), send=True):
    ins = core.configure_train(r, core.select(r, range(M)))
    replies = [Reply(i.partition_id, _step(i.partition_id, r, i.arrays), 5, {"train_loss": 1.0})
               for i in ins if i.partition_id not in dead]
    ins = None
    if send:
        core.instructions_sent(r)
    return core.train_round(r, replies, sampled=range(M), on_bad_reply="raise"), replies


def _reference(core, r, replies, dead):
    """What the spare-table design computed: S = returned models (failed rows: their mixed model),
    mixed in place; DFedCata's anchors become the old mixed models (failed rows keep theirs)."""
    X = core.models.data.copy()
    alive = core.alive_mask(p for p in range(M) if p not in dead)
    S = X.copy()
    for reply in replies:
        S[reply.partition_id] = np.concatenate([np.asarray(a).ravel() for a in reply.arrays])
    mix(core.live_mixing(r, alive), S, out=S)
    anchors = None
    if isinstance(core, DFedCataServer):
        anchors = X.copy()
        anchors[list(dead)] = core.anchors[list(dead)]
    return S, anchors


@pytest.mark.parametrize("cls, cfg", [(GossipCore, {}), (DFedCataServer, {"beta": 0.9})])
def test_a_round_with_a_failed_peer_gives_the_spare_tables_numbers(cls, cfg):
    core, twin = _core(cls, **cfg), _core(cls, **cfg)
    for r, dead in ((1, ()), (2, (3,)), (3, (0, 5)), (4, ())):
        # what the spare-table design gives, from the state before the round
        ins = core.configure_train(r, core.select(r, range(M)))
        replies = [Reply(i.partition_id, _step(i.partition_id, r, i.arrays), 5, {}) for i in ins
                   if i.partition_id not in dead]
        expected, anchors = _reference(core, r, replies, dead)
        ins = None
        core.instructions_sent(r)
        out = core.train_round(r, replies, sampled=range(M), on_bad_reply="raise")
        assert out["failures"] == len(dead)
        np.testing.assert_array_equal(core.models.data, expected)
        if anchors is not None:
            np.testing.assert_array_equal(core.anchors, anchors)
        # a core driven without instructions_sent (its spare kept) gives the same numbers
        _round(twin, r, dead, send=False)
        np.testing.assert_array_equal(twin.models.data, core.models.data)
        if anchors is not None:
            np.testing.assert_array_equal(twin.anchors, core.anchors)


@pytest.mark.parametrize("cls, cfg, keeps", [
    (GossipCore, {}, False),
    (DFedCataServer, {"extrapolation_anchor": "prev_mixed"}, False),
    (DFedCataServer, {"extrapolation_anchor": "prev_local"}, True),
    (DPSGDServer, {}, True),
])
def test_the_spare_is_released_once_the_instructions_are_sent(cls, cfg, keeps):
    core = _core(cls, **cfg)
    for r in (1, 2, 3):
        ins = core.configure_train(r, core.select(r, range(M)))
        assert all(np.shares_memory(a, core.spare) for i in ins for a in i.arrays if a.dtype == core.dtype)
        sent = [np.concatenate([a.ravel() for a in i.arrays]) for i in ins]
        replies = [Reply(i.partition_id, _step(i.partition_id, r, i.arrays), 5, {}) for i in ins]
        ins = None
        core.instructions_sent(r)
        assert (core.spare is not None) == keeps
        core.train_round(r, replies, sampled=range(M), on_bad_reply="raise")
    # the next round's start points are computed into a fresh spare, as before
    ins = core.configure_train(4, core.select(4, range(M)))
    assert core.spare is not None and len(ins) == M
    assert not any(np.array_equal(s, np.concatenate([a.ravel() for a in i.arrays])) for s, i in zip(sent, ins))
