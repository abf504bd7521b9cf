"""A node that Flower cannot reach is one failed client, counted once (Message API).

When a SuperNode dies, Flower's SuperLink answers the instruction itself: an error reply whose
sender is the SuperLink (node 1) and whose ``reply_to_message_id`` names the instruction. The
strategy maps it back to the partition it sent that instruction to, so the round records one
failure for that partition (with Flower's reason) and no rejected "reply from unknown node".
"""

from __future__ import annotations

from flwr.app import ArrayRecord, Error, Message

from flwr_strategies.clients.app import numpy_client_app
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

SUPERLINK_NODE_ID = 1  # the sender of the SuperLink's own replies
DEAD, DEAD_FROM = 1, 2  # partition 1 is unreachable from round 2 on


class DyingNodeGrid(InProcessGrid):
    """Answers the dead node's train instructions as Flower's SuperLink answers an unreachable node."""

    def push_messages(self, messages):
        ids = []
        for m in messages:
            cfg = m.content.config_records.get("config", {})
            dead = (m.metadata.dst_node_id == 1000 + DEAD and m.metadata.message_type == "train"
                    and int(cfg.get("server-round", 0)) >= DEAD_FROM)
            if not dead:
                ids.extend(super().push_messages([m]))
                continue
            m.metadata.__dict__["_message_id"] = f"dead-{len(self._replies)}"
            reply = Message(Error(code=0, reason="node unavailable"), reply_to=m)
            reply.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID  # as the SuperLink sends it
            self._replies[m.metadata.message_id] = reply
            ids.append(m.metadata.message_id)
        return ids


def test_unreachable_node_is_one_failure_of_its_partition():
    cfg = ExperimentConfig(method="fedavg", num_clients=3, rounds=3, seed=0, progress=False,
                           fraction_fit=1.0).resolve()
    exp = get_experiment(cfg)
    model = exp.model_fn()
    grid = DyingNodeGrid(numpy_client_app(lambda context: exp.build_client(context, model)), 3)
    strategy = exp.spec.message_strategy(exp.server_setup(), dict(exp.params))
    strategy.start(grid=grid, initial_arrays=ArrayRecord([a.copy() for a in exp.initial_parameters]), num_rounds=3)
    rounds = {r["round"]: r for r in strategy.history.rounds if r["round"] > 0}
    assert [rounds[r]["failures"] for r in (1, 2, 3)] == [0, 1, 1], rounds
    assert all(rounds[r]["rejected"] == 0 for r in (1, 2, 3)), rounds
    logged = [e for e in strategy.history.failure_log if e["phase"] == "fit"]
    assert [(e["round"], e["error"]) for e in logged] == [(2, "partition 1: node unavailable"),
                                                         (3, "partition 1: node unavailable")], logged


class SilentNodeGrid(InProcessGrid):
    """Partition 1's node stops answering from round 2 on (no reply at all: the message times out),
    and with ``leaves=True`` it is no longer connected from round 3 on."""

    def __init__(self, *args, leaves: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.leaves, self.round = leaves, 0

    def get_node_ids(self):
        nodes = super().get_node_ids()
        return [n for n in nodes if n != 1000 + DEAD] if self.leaves and self.round >= DEAD_FROM else nodes

    def push_messages(self, messages):
        ids = []
        for m in messages:
            cfg = m.content.config_records.get("config", {})
            if m.metadata.message_type == "train":
                self.round = int(cfg.get("server-round", 0))
            if m.metadata.dst_node_id == 1000 + DEAD and m.metadata.message_type == "train" and self.round >= DEAD_FROM:
                m.metadata.__dict__["_message_id"] = f"silent-{self.round}"
                ids.append(m.metadata.message_id)  # pushed, never answered
            else:
                ids.extend(super().push_messages([m]))
        return ids


def _silent_run(method: str, leaves: bool, **params):
    cfg = ExperimentConfig(method=method, num_clients=3, rounds=3, seed=0, progress=False,
                           fraction_fit=1.0, params=params).resolve()
    exp = get_experiment(cfg)
    model = exp.model_fn()
    grid = SilentNodeGrid(numpy_client_app(lambda context: exp.build_client(context, model)), 3, leaves=leaves)
    strategy = exp.spec.message_strategy(exp.server_setup(), dict(exp.params))
    strategy.start(grid=grid, initial_arrays=ArrayRecord([a.copy() for a in exp.initial_parameters]), num_rounds=3,
                   timeout=0.5)
    return strategy


def test_a_node_that_never_answers_is_a_logged_failure():
    strategy = _silent_run("fedavg", leaves=False)
    rounds = {r["round"]: r for r in strategy.history.rounds if r["round"] > 0}
    assert [rounds[r]["failures"] for r in (1, 2, 3)] == [0, 1, 1], rounds
    logged = [(e["round"], e["error"]) for e in strategy.history.failure_log]
    assert [(r, e.split(":")[0]) for r, e in logged] == [(2, "partition 1"), (3, "partition 1")], logged
    assert all("no reply" in e for _, e in logged), logged


def test_a_peer_that_leaves_is_a_logged_failure_every_round():
    strategy = _silent_run("dfedavg", leaves=True, neighbours=3)
    rounds = {r["round"]: r for r in strategy.history.rounds if r["round"] > 0}
    assert [rounds[r]["failures"] for r in (1, 2, 3)] == [0, 1, 1], rounds
    logged = [(e["round"], e["error"].split(":")[0]) for e in strategy.history.failure_log]
    assert logged == [(2, "partition 1"), (3, "partition 1")], strategy.history.failure_log


def test_fewer_nodes_than_the_minimum_names_the_setting():
    """Flower's FedAvg waits for ``min_train_nodes`` forever; the strategy stops the run naming it."""
    import numpy as np
    import pytest

    from flwr_strategies.baselines.server import FedAvgServer

    core = FedAvgServer([np.zeros(2, np.float32)], min_train=3)
    with pytest.raises(ValueError, match=r"round 4: cannot sample 3 clients .*min_train_nodes.*only 2 are connected"):
        core.select(4, [0, 2])
