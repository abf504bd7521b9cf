"""The in-process grid against the installed Flower (1.41, 1.42 and the nightly): it implements the
whole ``Grid`` interface, Flower's own FedAvg runs on it through ``Strategy.start()`` with the
closed-form weighted average as result, a raising ClientApp gives an error reply, and both
``pull_messages`` keywords work (``message_ids`` up to flwr 1.42, ``reply_to_message_ids`` from 1.43)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from flwr_strategies.simulations.inprocess_grid import InProcessGrid

NODES = 3
EXAMPLES = {0: 10, 1: 30, 2: 60}


def _client_app() -> ClientApp:
    """Each node returns the model plus (partition + 1) and ``num-examples`` 10, 30, 60, and counts
    its calls in ``context.state``."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        pid = int(context.node_config["partition-id"])
        calls = int(context.state["calls"]["n"]) + 1 if "calls" in context.state else 1
        context.state["calls"] = MetricRecord({"n": calls})
        arrays = [a + (pid + 1) for a in msg.content["arrays"].to_numpy_ndarrays()]
        return Message(RecordDict({"arrays": ArrayRecord(arrays),
                                   "metrics": MetricRecord({"num-examples": EXAMPLES[pid], "calls": calls})}),
                       reply_to=msg)

    return app


def _start(grid: InProcessGrid, rounds: int, **kwargs):
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=NODES, min_available_nodes=NODES)
    initial = [np.zeros((2, 3), dtype=np.float64), np.arange(4, dtype=np.float64)]
    return strategy.start(grid=grid, initial_arrays=ArrayRecord(initial), num_rounds=rounds, **kwargs), initial


def test_grid_implements_every_abstract_method_of_the_installed_flower():
    assert not getattr(InProcessGrid, "__abstractmethods__", set())
    grid = InProcessGrid(_client_app(), NODES)
    assert isinstance(grid, Grid)
    assert grid.run.run_id == InProcessGrid.run_id  # read by Flower's legacy start_grid


def test_flower_fedavg_on_the_grid_gives_the_weighted_average():
    grid = InProcessGrid(_client_app(), NODES)
    result, initial = _start(grid, rounds=2)
    shift = sum((pid + 1) * n for pid, n in EXAMPLES.items()) / sum(EXAMPLES.values())  # 2.5 per round
    got = result.arrays.to_numpy_ndarrays()
    for g, a in zip(got, initial):
        np.testing.assert_allclose(g, a + 2 * shift, rtol=0, atol=1e-12)
    assert sorted(result.train_metrics_clientapp) == [1, 2]
    # one Context per node, kept across rounds
    assert [int(c.state["calls"]["n"]) for c in grid.contexts.values()] == [2, 2, 2]


def test_flower_early_stop_works_on_the_grid():
    """flwr 1.43's ``Strategy.start(should_stop=...)`` stops on the grid after round 2; older
    Flowers have no such argument."""
    grid = InProcessGrid(_client_app(), NODES)
    if "should_stop" not in inspect.signature(FedAvg.start).parameters:
        with pytest.raises(TypeError, match="should_stop"):
            _start(grid, rounds=5, should_stop=lambda rnd, res: rnd >= 2)
        return
    result, _ = _start(grid, rounds=5, should_stop=lambda rnd, res: rnd >= 2)
    assert sorted(result.train_metrics_clientapp) == [1, 2]


def _message(grid: InProcessGrid, node_id: int) -> Message:
    return Message(RecordDict({"arrays": ArrayRecord([np.ones(2)])}), node_id, "train", group_id="1")


def test_pull_messages_by_either_keyword_and_error_replies():
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        if context.node_config["partition-id"] == 1:
            raise RuntimeError("boom")
        return Message(RecordDict({"metrics": MetricRecord({"num-examples": 1})}), reply_to=msg)

    grid = InProcessGrid(app, NODES)
    ids = list(grid.push_messages([_message(grid, n) for n in grid.get_node_ids()]))
    assert len(set(ids)) == NODES and all(ids)
    first = list(grid.pull_messages(message_ids=[ids[0]]))
    second = list(grid.pull_messages(reply_to_message_ids=[ids[1]]))
    rest = list(grid.pull_messages())  # no filter: whatever is waiting
    assert [m.metadata.reply_to_message_id for m in first + second + rest] == ids
    assert not first[0].has_error() and second[0].has_error() and "boom" in second[0].error.reason
    assert list(grid.pull_messages(ids)) == []  # each reply is handed out once
    with pytest.raises(ValueError, match="not both"):
        grid.pull_messages([ids[0]], message_ids=[ids[0]])


def test_nodes_register_in_partition_order_unless_told_otherwise():
    grid = InProcessGrid(_client_app(), NODES)
    nodes = list(grid.get_nodes())
    assert [n.node_id for n in nodes] == [1000, 1001, 1002]
    assert [n.registered_at for n in nodes] == sorted(n.registered_at for n in nodes)
    grid.registration_order = [1002, 1000, 1001]
    assert [n.node_id for n in sorted(grid.get_nodes(), key=lambda n: n.registered_at)] == [1002, 1000, 1001]
