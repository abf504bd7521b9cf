"""The project's Flower app (``simulations/app.py``), run in this process on an in-process Grid:
it learns the federation's size from the nodes, gives the in-process backend's numbers (every
method on its Message-API strategy), writes
results.json as it goes and fails loudly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode

from flwr_strategies.simulations import app as project_app
from flwr_strategies.simulations.backends import run_driver
from flwr_strategies.simulations.experiment import ExperimentConfig
from flwr_strategies.simulations.inprocess_grid import InProcessGrid


def _serve(run_config: dict, num_nodes: int, client_app=None, registration_order=None):
    grid = InProcessGrid(client_app or project_app.client_app, num_nodes, run_config=run_config)
    grid.registration_order = registration_order
    ctx = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)
    return project_app.serve(grid, ctx)


def _rows(rounds):
    return [(r["round"], r["loss"], r["accuracy"], r["bytes_up"], r["bytes_down"], r["clients"], r["failures"]) for r in rounds]


def test_core_method_gives_the_inprocess_numbers(tmp_path):
    cfg = ExperimentConfig(method="fedprox", num_clients=5, rounds=2, fraction_fit=0.6, seed=2, progress=False)
    rc = {"experiment": json.dumps(cfg.to_dict()), "out-dir": str(tmp_path)}
    report = _serve(rc, 5)
    assert report.path == "Message API strategy"
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["status"] == "completed" and saved["config"]["num_clients"] == 5
    driver = run_driver(cfg)
    assert _rows(saved["rounds"]) == _rows(driver.rounds)
    with np.load(tmp_path / "final.npz") as npz:
        for i, a in enumerate(driver.final_arrays):
            np.testing.assert_array_equal(npz[f"arr_{i}"], a)


def test_num_clients_zero_means_one_client_per_node(tmp_path):
    rc = {"method": "fedavg", "num-clients": 0, "num-server-rounds": 1, "out-dir": str(tmp_path)}
    _serve(rc, 3)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["config"]["num_clients"] == 3
    assert saved["rounds"][1]["clients"] == 3


def test_client_count_mismatch_fails_at_once_naming_both_numbers():
    rc = {"method": "fedavg", "num-clients": 10, "num-server-rounds": 1}
    with pytest.raises(ValueError, match="num-clients=10 but the federation has 2 SuperNodes"):
        _serve(rc, 2)


def test_bad_method_fails_before_waiting_for_nodes(tmp_path):
    with pytest.raises(KeyError, match="unknown method 'nope'"):
        _serve({"method": "nope", "num-clients": 0, "out-dir": str(tmp_path)}, 2)


def test_dead_actor_stops_the_run(tmp_path):
    """A client whose Ray actor died gives an error reply; the ServerApp stops with ActorDied and
    results.json says failed (Flower's runtime would otherwise go on without that actor)."""

    class DyingApp(project_app.ProjectClientApp):
        def __call__(self, message, context):
            if message.metadata.message_type == "train" and context.node_config["partition-id"] == 1 \
                    and int(message.content["config"]["server-round"]) == 2:
                return Message(Error(code=ErrorCode.UNKNOWN, reason="<class 'ray.exceptions.ActorDiedError'>:<'The actor "
                                     "died unexpectedly before finishing this task.'>"), reply_to=message)
            return super().__call__(message, context)

    rc = {"method": "fedavg", "num-clients": 3, "num-server-rounds": 3, "out-dir": str(tmp_path)}
    with pytest.raises(project_app.ActorDied, match="round 2: a Ray client actor died"):
        _serve(rc, 3, DyingApp())
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["status"] == "failed" and "ActorDied" in saved["error"]
    assert [r["round"] for r in saved["rounds"]] == [0, 1, 2]


def test_registration_order_gives_the_query_numbers_and_a_wrong_order_stops_the_run(tmp_path):
    """``node-order = registration`` (what the ray backend uses in Flower's simulation runtime)
    maps partitions from the nodes' registration order without querying them; every reply's
    partition-id confirms it, and a wrong order stops the run."""
    cfg = ExperimentConfig(method="fedavg", num_clients=4, rounds=2, fraction_fit=0.5, seed=3, progress=False)
    base = {"experiment": json.dumps(cfg.to_dict())}
    _serve({**base, "out-dir": str(tmp_path / "query")}, 4)
    _serve({**base, "out-dir": str(tmp_path / "reg"), "node-order": "registration"}, 4)
    by_query = json.loads((tmp_path / "query" / "results.json").read_text())["rounds"]
    by_registration = json.loads((tmp_path / "reg" / "results.json").read_text())["rounds"]
    assert _rows(by_query) == _rows(by_registration)
    everyone = {"experiment": json.dumps({**cfg.to_dict(), "fraction_fit": 1.0}), "node-order": "registration"}
    with pytest.raises(RuntimeError, match="node order is wrong"):
        _serve(everyone, 4, registration_order=[1001, 1000, 1002, 1003])
