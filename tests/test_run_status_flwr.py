"""A user's app in which every client refuses its setting ends ``finished:failed`` under ``flwr run`` (issue 26).

Flower's quickstart-pytorch (Message API, the project's copy with local data) switched to SCAFFOLD by
the README's diff, run with the example's own ``train()`` (``SGD(momentum=0.9)``) at lr 0.05: every
client refuses that step at its first optimizer step, in every round. Before issue 26 all client
calls failed, every round, and Flower reported ``finished:completed`` with an untrained model. Now
the strategy raises :class:`~flwr_strategies.NoProgressError` from inside ``start()`` after two
rounds without an aggregated update, so Flower marks the run failed (``flwr ls``), and the run's log
names the rounds, the clients' refusal and its fix. 2 SuperNodes, 3 rounds.
"""

from __future__ import annotations

import pytest

from flwr_strategies.simulations.deployment import LocalSimulation, flower_cli_available
from quickstart_fixture import switched_app

pytestmark = pytest.mark.skipif(not flower_cli_available(), reason="needs the Flower CLI (flwr, flower-superlink)")

REFUSAL = "SCAFFOLD refuses SGD(lr=0.05, momentum=0.9)"


@pytest.fixture(scope="module")
def simulation(tmp_path_factory):
    with LocalSimulation(tmp_path_factory.mktemp("flwr-status")) as sim:
        yield sim


def test_flower_marks_the_run_failed_when_every_client_refuses_its_setting(simulation, tmp_path):
    app = switched_app("message", "scaffold", tmp_path)
    config = {"num-server-rounds": 3, "learning-rate": 0.05, "local-epochs": 1, "fraction-evaluate": 0.0}
    res = simulation.flwr_run(app, config, timeout=420, federation_config={"num-supernodes": 2})
    log = f"{res.stdout}\n{res.stderr}\n{simulation.all_logs(20000)}"
    status = simulation.run_status(simulation.run_id(res))
    assert status == "finished:failed", f"Flower's status {status!r}\n{log[-6000:]}"
    assert "NoProgressError" in log and "rounds 1 to 2: every sampled client failed" in log, log[-6000:]
    assert REFUSAL in log and "lr <= 0.02 with momentum 0.9" in log, log[-6000:]  # the cause, with its fix
    assert "[ROUND 3/3]" not in log, log[-6000:]  # stopped after 2 rounds


@pytest.mark.ray
def test_the_ray_backend_and_the_serverapp_name_a_diverged_run(tmp_path):
    """The same divergence rule on the ``ray`` backend: the ServerApp's own results.json says
    ``degraded: the loss diverged: ...`` and the runner's status (exit 3) says the same. DPDO at step
    1 and epsilon 4 on digits runs away (in process: 2.42 -> 22.8 in 5 rounds)."""
    import json

    from flwr_strategies.simulations.experiment import ExperimentConfig
    from flwr_strategies.simulations.runner import run_experiment

    cfg = ExperimentConfig(method="dpdo", lr=1.0, num_clients=4, rounds=3, client_seed=1, backend="ray", progress=False,
                           out=str(tmp_path), params={"epsilon": 4.0})
    res = run_experiment(cfg)
    assert res["status"].startswith("degraded: the loss diverged: the final loss"), res["status"]
    assert "times the initial loss" in res["status"] and "chance-level loss 2.303" in res["status"]
    assert json.loads((tmp_path / "results.json").read_text())["summary"]["diverged"]
