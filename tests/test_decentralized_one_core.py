"""One decentralized core for every peer-graph method (issue 20), failed and absent peers (issue 18),
topology requests the network cannot meet (issue 19), and DO-ADP's public model at round 0."""

from __future__ import annotations

import copy
import logging

import numpy as np
import pytest

from flwr_strategies.core.messages import Reply
from flwr_strategies.decentralized import GraphConfig, Topology, mix, mixing_matrix, restrict_to_alive
from flwr_strategies.decentralized.server import DecentralizedCore, GossipCore, PeerFailure
from flwr_strategies.dfedcata.config import DFedCataConfig
from flwr_strategies.dfedcata.server import DFedAvgServer, DFedCataServer, DPSGDServer
from flwr_strategies.doadp.baseline_server import CPGTServer, DPDDAServer, DPDOServer
from flwr_strategies.doadp.config import CPGTConfig, DMSGDConfig, DOADPConfig, DPDDAConfig, DPDOConfig
from flwr_strategies.doadp.peer import PublicTableCore
from flwr_strategies.doadp.server import DMSGDServer, DOADPServer

M, D = 6, 12
INIT = [np.linspace(-1, 1, D, dtype=np.float32).reshape(3, 4)]


def gossip(cls, policy="renormalize", **kw):
    graph = GraphConfig(neighbours=4, failure_policy=policy, client_eval_every=0)
    extra = {"config": DFedCataConfig(beta=0.9)} if cls is DFedCataServer else {}
    return cls([a.copy() for a in INIT], num_partitions=M, graph=graph, seed=0,
               on_train_config=lambda r: {"lr": 0.1}, **extra, **kw)


PUBLIC = {
    DOADPServer: lambda: DOADPConfig(k_frac=0.5, sigma=1.0, epsilon=1e6, eval_every=1),
    DMSGDServer: lambda: DMSGDConfig(),
    DPDOServer: lambda: DPDOConfig(epsilon=50.0),
    DPDDAServer: lambda: DPDDAConfig(sigma=1.0, epsilon=1e6),
    CPGTServer: lambda: CPGTConfig(epsilon=50.0, k_frac=0.5),
}


def public(cls, policy="renormalize", q=50, **kw):
    return cls([a.astype(np.float64) for a in INIT], num_partitions=M, num_rounds=6, dataset_size=q, batch_size=4,
               config=PUBLIC[cls](), graph=cls.default_graph(neighbours=3, failure_policy=policy), **kw)


def public_reply(core, ins, n=50):
    """A well-formed reply of each public-table method to its instruction."""
    d, pid = core.d, ins.partition_id
    if isinstance(core, CPGTServer):
        idx = np.arange(core.k)
        arrays = [idx, np.full(core.k, 0.1 * pid), idx, np.full(core.k, 0.2)]
    elif isinstance(core, DOADPServer):
        arrays = [np.arange(core.k), np.full(core.k, 0.1 * (pid + 1), dtype=core.config.msg_dtype)]
    else:
        arrays = [np.full(d, 0.1 * pid)]
    return Reply(pid, arrays, n, {"dpdda_sampled": 1, "doadp_active": 1})


ALL = [DFedAvgServer, DFedCataServer, DPSGDServer, *PUBLIC]


def build(cls, **kw):
    return gossip(cls, **kw) if issubclass(cls, GossipCore) else public(cls, **kw)


def one_round(core, r, available, replying=None):
    """select -> configure -> replies of ``replying`` (default: every selected peer) -> train_round."""
    sampled = core.select(r, available)
    ins = core.configure_train(r, sampled)
    replying = sampled if replying is None else replying
    if isinstance(core, GossipCore):
        replies = [Reply(i.partition_id, [a + 0.5 * (i.partition_id + 1) for a in i.arrays], 10, {"train_loss": 1.0})
                   for i in ins if i.partition_id in replying]
    else:
        replies = [public_reply(core, i) for i in ins if i.partition_id in replying]
    return core.train_round(r, replies, sampled=[i.partition_id for i in ins], on_bad_reply="raise")


# ----------------------------------------------------------------------------------- one core
def test_every_decentralized_method_runs_on_the_one_core():
    import flwr_strategies.doadp.theory as theory
    from flwr_strategies.decentralized import mixing

    for cls in ALL:
        core = build(cls)
        assert isinstance(core, DecentralizedCore) and cls.full_participation
        assert isinstance(core.graph, GraphConfig)  # one graph vocabulary: topology, neighbours, weights...
    assert theory.spectral_gap is mixing.spectral_gap  # one spectral gap
    # DO-ADP's paper graph (Huo et al., Sec. V): i +- 1, 2, 3 is the circulant with neighbourhoods of 7
    g = PublicTableCore.default_graph()
    assert (g.topology, g.neighbours) == ("circulant", 7)
    core = DOADPServer([np.zeros(8)], num_partitions=20, num_rounds=3, dataset_size=50, batch_size=4,
                       config=DOADPConfig(sigma=1.0, epsilon=1e6))
    assert (core.W.toarray() > 0).sum(axis=1).tolist() == [7] * 20
    from flwr_strategies.doadp.theory import spectral_gap

    assert spectral_gap(core.W) == pytest.approx(0.186326, abs=1e-6)  # the paper network's rho
    # an explicit graph, as DO-ADP's former adjacency argument
    ring = Topology("ring", 20).graph(0)
    fixed = DOADPServer([np.zeros(8)], num_partitions=20, num_rounds=3, dataset_size=50, batch_size=4,
                        config=DOADPConfig(sigma=1.0, epsilon=1e6), topology=Topology.from_adjacency(ring.toarray()))
    np.testing.assert_array_equal(fixed.W.toarray(), mixing_matrix(ring).toarray())


def test_public_table_cores_refuse_graphs_their_agents_cannot_keep():
    kw = dict(num_partitions=M, num_rounds=3, dataset_size=50, batch_size=4, config=DOADPConfig(sigma=1.0, epsilon=1e6))
    with pytest.raises(ValueError, match="redrawn every round"):
        DOADPServer([np.zeros(8)], graph=DOADPServer.default_graph(topology="random", neighbours=3), **kw)
    with pytest.raises(ValueError, match="undirected"):
        DOADPServer([np.zeros(8)], graph=DOADPServer.default_graph(topology="exponential"), **kw)
    with pytest.raises(ValueError, match="client_eval_every"):
        DOADPServer([np.zeros(8)], graph=DOADPServer.default_graph(neighbours=3, client_eval_every=1), **kw)
    with pytest.raises(ValueError, match="must be odd"):
        DOADPServer.default_graph(neighbours=4)


def test_federated_evaluation_is_declared_per_core():
    assert not DOADPServer.federated_evaluation_allowed
    for cls in (DPDOServer, DPDDAServer, CPGTServer):
        assert not cls.federated_evaluation_allowed  # scoring on training records is outside the accounting
    for cls in (DFedAvgServer, DFedCataServer, DPSGDServer, DMSGDServer):  # nothing private to protect
        assert cls.federated_evaluation_allowed


# ----------------------------------------------------------------------------------- failures
@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_a_peer_whose_node_is_gone_is_a_failure_every_round(cls, caplog):
    core = build(cls)
    everyone = list(range(M))
    assert one_round(core, 1, everyone)["failures"] == 0
    with caplog.at_level(logging.WARNING):
        for r in (2, 3):
            out = one_round(core, r, [p for p in everyone if p != 2])  # peer 2's node is no longer connected
            assert out["failures"] == 1 and out["absent"] == 1, out
    assert "peers [2] are not connected" in caplog.text


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_failure_policy_stop_stops_with_the_state_unchanged(cls):
    core = build(cls, policy="stop")
    one_round(core, 1, list(range(M)))
    before = copy.deepcopy(core.state_dict())
    with pytest.raises(PeerFailure, match=r"\[2\] are not connected"):
        one_round(core, 2, [0, 1, 3, 4, 5])
    with pytest.raises(PeerFailure, match=r"\[4\] failed"):
        one_round(core, 2, list(range(M)), replying=[0, 1, 2, 3, 5])
    after = core.state_dict()
    assert after["server_round"] == before["server_round"] == 1
    for key, value in before["method"].items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, after["method"][key])


def test_sequential_mode_expects_only_the_peer_whose_turn_it_is():
    core = DFedCataServer([a.copy() for a in INIT], num_partitions=M, seed=0, on_train_config=lambda r: {"lr": 0.1},
                          graph=GraphConfig(neighbours=4, client_eval_every=0),
                          config=DFedCataConfig(beta=0.9, sequential_inplace=True))
    assert one_round(core, 1, [1, 2, 3, 4, 5])["failures"] == 1  # peer 0's turn, its node is gone
    assert one_round(core, 2, [0, 2, 3, 4, 5])["failures"] == 1  # peer 1's turn
    out = one_round(core, 3, [0, 1, 3, 4, 5])  # peer 2's turn, its node is gone
    assert (out["failures"], out["absent"]) == (1, 1)
    assert one_round(core, 4, [0, 1, 2, 3, 5])["failures"] == 0  # peer 3's turn, peer 4 is gone


def test_gossip_absent_peer_is_the_round_in_which_it_failed():
    # the dead peer keeps its model, its neighbours mix over the live peers (rows renormalised)
    a, b = gossip(DFedAvgServer), gossip(DFedAvgServer)
    for core in (a, b):
        one_round(core, 1, list(range(M)))
    X1 = a.models.data.copy()
    one_round(a, 2, [0, 1, 3, 4, 5])  # peer 2 not connected
    one_round(b, 2, list(range(M)), replying=[0, 1, 3, 4, 5])  # peer 2 connected, failed
    np.testing.assert_array_equal(a.models.data, b.models.data)
    alive = np.ones(M, bool)
    alive[2] = False
    Y = X1 + 0.5 * (np.arange(M, dtype=np.float32)[:, None] + 1)
    Y[2] = X1[2]
    W = restrict_to_alive(mixing_matrix(Topology("random", M, seed=0, neighbours=4).graph(1)), alive)
    np.testing.assert_array_equal(a.models.data, mix(W, Y))


def test_doadp_absent_agent_is_left_out_of_the_consensus():
    core = public(DOADPServer)
    one_round(core, 1, list(range(M)))
    XHAT = core.XHAT.copy()
    ins = core.configure_train(2, core.select(2, [0, 1, 3, 4, 5]))
    alive = np.ones(M, bool)
    alive[2] = False
    W = restrict_to_alive(core.W, alive)
    C = core.config.gamma * (mix(W, XHAT) - XHAT)
    for i in ins:
        np.testing.assert_allclose(i.arrays[0], C[i.partition_id], rtol=0, atol=1e-15)
    # with every agent there the consensus is the paper's: W itself
    full = core.configure_train(3, list(range(M)))
    np.testing.assert_allclose(full[0].arrays[0], core.config.gamma * (mix(core.W, XHAT) - XHAT)[0], atol=1e-15)


# ----------------------------------------------------------------------------------- topology requests
def test_neighbourhood_larger_than_the_network_is_logged_and_reported(caplog):
    with caplog.at_level(logging.WARNING):
        core = DFedAvgServer([np.zeros(4, np.float32)], num_partitions=4)  # the paper's 10 on 4 peers
    assert "neighbours=10 exceeds the 4 peers" in caplog.text and "complete graph" in caplog.text
    assert "neighbours=10" in core.topology.adjustment
    np.testing.assert_allclose(core.mixing_matrix(1).toarray(), np.full((4, 4), 0.25))
    out = one_round(core, 1, range(4))
    assert out["graph_adjusted"] == 1 and out["spectral_gap"] == pytest.approx(1.0)
    # a graph the network can hold is not adjusted and says nothing
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        fits = DFedAvgServer([np.zeros(4, np.float32)], num_partitions=4, graph=GraphConfig(neighbours=3))
    assert fits.topology.adjustment is None and "exceeds" not in caplog.text
    assert "graph_adjusted" not in one_round(fits, 1, range(4))
    # DO-ADP's neighbourhood of 7 on 4 agents: the same documented adjustment
    doadp = DOADPServer([np.zeros(8)], num_partitions=4, num_rounds=3, dataset_size=50, batch_size=4,
                        config=DOADPConfig(sigma=1.0, epsilon=1e6))
    assert "neighbours=7 exceeds the 4 peers" in doadp.topology.adjustment


# ----------------------------------------------------------------------------------- DO-ADP's public model
def test_doadp_round_zero_scores_the_initial_model():
    x0 = [np.linspace(-1, 1, D).reshape(3, 4)]
    core = DOADPServer(x0, num_partitions=M, num_rounds=4, dataset_size=50, batch_size=4,
                       graph=DOADPServer.default_graph(neighbours=3), config=DOADPConfig(sigma=1.0, epsilon=1e6))
    assert core.config.public_copy == "zero" and not core.XHAT.any()  # the paper's public copies start at 0
    seen = []
    core.evaluate(0, lambda r, arrays: seen.append(arrays[0]) or (0.0, {}))
    np.testing.assert_array_equal(seen[0], x0[0])  # ... but round 0 scores the app's initial model
    assert all(core.should_evaluate(r) for r in range(5))  # every round by default, as Flower's strategies
    one_round(core, 1, list(range(M)))
    np.testing.assert_allclose(core.global_arrays()[0].ravel(), core.XHAT.mean(axis=0))


def test_private_model_is_sent_only_by_consenting_agents():
    core = DOADPServer([a.astype(np.float64) for a in INIT], num_partitions=M, num_rounds=4, dataset_size=50,
                       batch_size=4, graph=DOADPServer.default_graph(neighbours=3),
                       config=DOADPConfig(k_frac=0.5, sigma=1.0, epsilon=1e6, evaluate_private=True))
    ins = core.configure_train(1, list(range(M)))
    assert all(i.config["report_model"] == 1 for i in ins)  # the server's request
    replies = []
    for i in ins:
        r = public_reply(core, i)
        if i.partition_id in (1, 4):  # two agents consent
            r.arrays.append(np.full(core.d, float(i.partition_id)))
        replies.append(r)
    out = core.train_round(1, replies, sampled=range(M), on_bad_reply="raise")
    assert out["active"] == M  # declining agents' messages still count
    seen = []
    _, metrics = core.evaluate(1, lambda r, arrays: seen.append(arrays[0].ravel()) or (0.0, {"accuracy": 0.5}))
    np.testing.assert_array_equal(seen[1], np.full(D, 2.5))  # the mean of the two private models received
    assert metrics["private_models_reported"] == 2 and metrics["private_models_outside_guarantee"] == 1


# ----------------------------------------------------------------------------------- through Flower
def test_node_gone_mid_run_is_counted_every_round_through_the_message_api():
    """The issue's deployment: a SuperNode killed after round 3 of DFedCata; Flower then lists 2 of 3
    nodes. Every later round records the failure (and the run's records say so)."""
    from apiharness import message_run

    from flwr_strategies.clients.app import numpy_client_app
    from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
    from flwr_strategies.simulations.inprocess_grid import InProcessGrid

    class KilledNodeGrid(InProcessGrid):
        trains = 0

        def push_messages(self, messages):
            messages = list(messages)
            if messages and messages[0].metadata.message_type == "train":
                self.trains += 1
            return super().push_messages(messages)

        def get_node_ids(self):
            nodes = list(self.contexts)
            return [n for n in nodes if n != 1001] if self.trains >= 3 else nodes

    cfg = ExperimentConfig(method="dfedcata", dataset="digits", num_clients=3, rounds=6, model="logreg", lr=0.1,
                           local_epochs=1, batch_size=32, seed=0, progress=False,
                           params={"beta": 0.9, "neighbours": 3})
    exp = get_experiment(cfg.resolve())
    grid = KilledNodeGrid(numpy_client_app(lambda context: exp.build_client(context, exp.model_fn())), 3)
    _, strategy, _ = message_run(cfg, clients=grid)
    rounds = {r["round"]: r for r in strategy.history.rounds if r["round"] > 0}
    assert [rounds[r]["failures"] for r in range(1, 7)] == [0, 0, 0, 1, 1, 1]
    assert [rounds[r]["fit_absent"] for r in range(1, 7)] == [0, 0, 0, 1, 1, 1]
    assert rounds[6]["clients"] == 2
