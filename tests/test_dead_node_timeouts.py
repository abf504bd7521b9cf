"""A node that a round found unreachable costs one timeout, not one per round (issue 29, Message API).

Flower lists a dead SuperNode in ``grid.get_node_ids()`` until its heartbeats have been missing
for twice their interval, and a SuperNode whose ClientApp hangs for as long as it lives. The grid
here lists partition 1's node throughout; while the node is down it answers nothing (no reply, no
error) and ``send_and_receive`` waits its full ``timeout`` when a reply is missing, as Flower's grid
does. The strategy must wait for it in the round that finds it down only, leave it out of later
rounds (a failed peer for a decentralized method, not sampled for FedAvg), log it each round, and
take it back once it answers a re-check. The real deployment (a killed SuperNode) is in
``tests/test_deployment_faults.py``.
"""

from __future__ import annotations

import time

import pytest
from flwr.app import ArrayRecord, Error, Message
from flwr.common.constant import ErrorCode

from flwr_strategies.clients.app import numpy_client_app
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

DEAD = 1  # partition 1's node (node id 1001)
TIMEOUT_S = 2.0


class DownNodeGrid(InProcessGrid):
    """Partition 1's node is down in the training rounds ``down`` (from the train message of the
    first such round on): the messages it gets wait in a queue, answered when it is up again.
    ``unavailable=True`` answers its messages as Flower's SuperLink does for a node that missed its
    heartbeats (error ``NODE_UNAVAILABLE`` from the SuperLink) instead of leaving them unanswered."""

    def __init__(self, *args, down: range, unavailable: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.down, self.unavailable = down, unavailable
        self.round, self.queued, self.waited, self.sent = 0, [], [], []

    def _up(self) -> bool:
        return self.round not in self.down

    def push_messages(self, messages):
        ids = []
        for m in messages:
            if m.metadata.message_type == "train":
                self.round = int(m.content.config_records["config"]["server-round"])
            self.sent.append((self.round, m.metadata.dst_node_id, m.metadata.message_type))
            if m.metadata.dst_node_id != 1000 + DEAD or self._up():
                ids.extend(super().push_messages([m]))
                continue
            m.metadata.__dict__["_message_id"] = f"down-{len(self.sent)}"
            if self.unavailable:
                reply = Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason="Node Unavailable"), reply_to=m)
                reply.metadata.__dict__["_src_node_id"] = 1  # the SuperLink
                self._replies[m.metadata.message_id] = reply
            else:
                self.queued.append(m)
            ids.append(m.metadata.message_id)
        return ids

    def pull_messages(self, message_ids=None):
        if self._up() and self.queued:  # the node is back: it answers what waited for it
            for m in self.queued:
                self._replies[m.metadata.message_id] = self.client_app(m, self.contexts[m.metadata.dst_node_id])
            self.queued = []
        return super().pull_messages(message_ids)

    def send_and_receive(self, messages, *, timeout=None):
        ids = list(self.push_messages(list(messages)))
        replies = list(self.pull_messages(ids))
        if len(replies) < len(ids) and timeout is not None:
            self.waited.append(self.round)
            time.sleep(timeout)  # as Flower's grid: it polls until the timeout
            replies += list(self.pull_messages(ids))
        return replies


def _run(method: str, rounds: int, down: range, unavailable: bool = False, fraction_fit: float = 1.0):
    cfg = ExperimentConfig(method=method, num_clients=3, rounds=rounds, seed=0, progress=False,
                           fraction_fit=fraction_fit).resolve()
    exp = get_experiment(cfg)
    model = exp.model_fn()
    grid = DownNodeGrid(numpy_client_app(lambda context: exp.build_client(context, model)), 3, down=down,
                        unavailable=unavailable)
    strategy = exp.spec.message_strategy(exp.server_setup(), dict(exp.params))
    strategy.start(grid=grid, initial_arrays=ArrayRecord([a.copy() for a in exp.initial_parameters]),
                   num_rounds=rounds, timeout=TIMEOUT_S)
    return strategy, grid, {r["round"]: r for r in strategy.history.rounds if r["round"] > 0}


def _fit_log(strategy) -> list[tuple[int, str]]:
    return [(e["round"], e["error"]) for e in strategy.history.failure_log if e["phase"] == "fit"]


def test_a_dead_peer_costs_one_timeout_and_is_a_logged_failure_every_round():
    rounds = 5
    strategy, grid, recs = _run("dfedcata", rounds, down=range(2, 100))
    # one round waited for it: the round that found it dead
    assert grid.waited == [2], grid.waited
    # no training message went to it after round 2 (the strategy re-checks it with a query)
    trains = [r for r, node, t in grid.sent if node == 1000 + DEAD and t == "train"]
    assert trains == [1, 2], trains
    # a failed peer of the emulated graph every round, logged every round
    assert [recs[r]["clients"] for r in range(1, rounds + 1)] == [3, 3, 2, 2, 2], recs
    assert [recs[r]["failures"] for r in range(1, rounds + 1)] == [0, 1, 1, 1, 1], recs
    assert [recs[r]["fit_absent"] for r in range(1, rounds + 1)] == [0, 0, 1, 1, 1], recs
    logged = _fit_log(strategy)
    assert [r for r, _ in logged] == list(range(2, rounds + 1)), logged
    assert all(e.startswith("partition 1: ") for _, e in logged), logged
    assert "no reply" in logged[0][1] and all("left out" in e and "since round 2" in e for _, e in logged[1:]), logged
    # round 2 waited the timeout; the later rounds do not
    assert recs[2]["wall_s"] >= TIMEOUT_S, recs[2]
    assert max(recs[r]["wall_s"] for r in range(3, rounds + 1)) < recs[2]["wall_s"] - TIMEOUT_S / 2, recs


def test_fedavg_samples_among_the_nodes_it_can_reach():
    """FedAvg training 2 of 3 nodes: the round that samples the dead node waits for it; the later
    rounds sample the other two and log the left-out partition."""
    rounds = 5
    strategy, grid, recs = _run("fedavg", rounds, down=range(1, 100), fraction_fit=2 / 3)
    assert len(grid.waited) == 1, grid.waited
    first = grid.waited[0]
    trains = [r for r, node, t in grid.sent if node == 1000 + DEAD and t == "train"]
    assert trains == [first], trains
    assert [recs[r]["failures"] for r in range(1, rounds + 1)] == [int(r == first) for r in range(1, rounds + 1)], recs
    assert all(recs[r]["fit_sampled_partitions"] == [0, 2] for r in range(first + 1, rounds + 1)), recs
    logged = _fit_log(strategy)
    assert [r for r, _ in logged] == list(range(first, rounds + 1)), logged
    assert all("left out" in e for _, e in logged[1:]), logged


def test_fedavg_that_needs_every_node_still_waits_for_it():
    """min_train_nodes = 3 of 3 nodes: leaving the dead node out would make the round impossible,
    so every round sends to it and waits, as before (each round a logged failure)."""
    strategy, grid, recs = _run("fedavg", 4, down=range(2, 100))
    assert grid.waited == [2, 3, 4], grid.waited
    assert [recs[r]["failures"] for r in range(1, 5)] == [0, 1, 1, 1], recs
    assert [r for r, _ in _fit_log(strategy)] == [2, 3, 4]


def test_a_node_that_answers_a_recheck_rejoins():
    """Down in round 2 only: round 3 leaves it out and re-checks it; it answers, and from round 4 on
    it trains again."""
    strategy, grid, recs = _run("dfedcata", 5, down=range(2, 3))
    assert grid.waited == [2], grid.waited
    assert [recs[r]["clients"] for r in range(1, 6)] == [3, 3, 2, 3, 3], recs
    assert [recs[r]["failures"] for r in range(1, 6)] == [0, 1, 1, 0, 0], recs
    assert [r for r, _ in _fit_log(strategy)] == [2, 3], _fit_log(strategy)
    assert not strategy.unreachable.nodes


def test_the_superlinks_unavailable_reply_marks_the_node_too():
    """Flower's SuperLink answers for a node that missed its heartbeats; that node is left out of
    the later rounds too (not sent a train message that comes straight back as an error)."""
    strategy, grid, recs = _run("dfedcata", 4, down=range(2, 100), unavailable=True)
    assert grid.waited == []
    logged = _fit_log(strategy)
    assert [r for r, _ in logged] == [2, 3, 4] and "Node Unavailable" in logged[0][1], logged
    assert all("left out" in e and "Node Unavailable" in e for _, e in logged[1:]), logged
    trains = [r for r, node, t in grid.sent if node == 1000 + DEAD and t == "train"]
    assert trains == [1, 2], trains
    assert [recs[r]["failures"] for r in range(1, 5)] == [0, 1, 1, 1], recs
