"""The ``ray`` backend: ``flwr run`` of the project's Message-API app in Flower's simulation runtime,
against a private local simulation SuperLink. Each test starts Ray (tens of seconds on 2 cores).

- same per-round numbers and final model as the in-process backend on the same seed, and no
  deprecation warning anywhere in the run's logs;
- a client actor killed mid-run stops the run loudly (Flower does not replace dead actors);
- ``flwr run`` of the repository itself, with Flower's default simulation size, finishes, and a
  run whose ServerApp fails is reported as ``finished:failed``.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from flwr_strategies.simulations.backends import RayRunError, run_driver, run_ray, write_app_dir
from flwr_strategies.simulations.deployment import LocalSimulation, pid_alive
from flwr_strategies.simulations.experiment import ExperimentConfig

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[1]


def _rows(rounds):
    return [(r["round"], r["loss"], r["accuracy"], r["bytes_up"], r["bytes_down"], r["clients"], r["failures"]) for r in rounds]


def test_ray_gives_the_inprocess_numbers_without_deprecation_warnings(tmp_path):
    cfg = ExperimentConfig(method="fedavg", num_clients=4, rounds=3, fraction_fit=0.5, seed=1, client_cpus=2,
                           progress=False)
    seen = []
    outcome, timing = run_ray(cfg, on_round_end=lambda rec: seen.append(rec["round"]), workdir=tmp_path)
    reference = run_driver(cfg)
    assert _rows(outcome.rounds) == _rows(reference.rounds)
    for a, b in zip(outcome.final_arrays, reference.final_arrays):
        np.testing.assert_array_equal(a, b)
    assert reference.rounds[-1]["accuracy"] > reference.rounds[0]["accuracy"] + 0.3
    assert seen == [0, 1, 2, 3]  # progress reported round by round
    assert timing["startup_s"] > 0 and timing["rounds_s"] > 0
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").glob("*.log"))
    assert "Successfully started run" in logs
    assert "deprecat" not in logs.lower(), [line for line in logs.splitlines() if "eprecat" in line]


KILLING_APP = textwrap.dedent('''
    """The project's ClientApp, except that partition 1 kills its own Ray actor in round 2."""
    import os
    import signal

    from flwr_strategies.simulations.app import ProjectClientApp


    class KillingClientApp(ProjectClientApp):
        def __call__(self, message, context):
            if (message.metadata.message_type == "train" and context.node_config["partition-id"] == 1
                    and int(message.content["config"]["server-round"]) == 2):
                os.kill(os.getpid(), signal.SIGKILL)
            return super().__call__(message, context)


    client_app = KillingClientApp()
''')


def test_killed_client_actor_fails_the_run_loudly(tmp_path):
    app = write_app_dir(tmp_path / "app", clientapp="killing_app:client_app")
    (app / "killing_app.py").write_text(KILLING_APP)
    cfg = ExperimentConfig(method="fedavg", num_clients=3, rounds=4, seed=0, client_cpus=2, progress=False)
    with pytest.raises(RayRunError) as info:
        run_ray(cfg, app_dir=app, workdir=tmp_path / "work")
    message = str(info.value)
    assert "finished:failed" in message and "Ray client actor died" in message, message[-3000:]
    saved = json.loads((tmp_path / "work" / "out" / "results.json").read_text())
    assert saved["status"] == "failed"
    assert [r["round"] for r in saved["rounds"]] == [0, 1, 2]  # stopped in round 2, not degraded to the end


def test_flwr_run_of_the_repository_finishes_and_failures_are_reported(tmp_path):
    """``flwr run .`` as shipped: the default simulation size (Flower's 2 SuperNodes) and the
    project's defaults (rounds shortened); then a failing ServerApp shows as failed."""
    with LocalSimulation(tmp_path) as sim:
        out = tmp_path / "out"
        res = sim.flwr_run(ROOT, {"num-server-rounds": 2, "out-dir": str(out)}, timeout=600)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        assert sim.run_status(sim.run_id(res)) == "finished:completed", res.stdout[-3000:]
        saved = json.loads((out / "results.json").read_text())
        assert saved["status"] == "completed" and saved["config"]["num_clients"] == 2
        assert saved["rounds"][-1]["accuracy"] > saved["rounds"][0]["accuracy"] + 0.3
        bad = sim.flwr_run(ROOT, {"method": "nope", "num-server-rounds": 2}, timeout=600)
        assert sim.run_status(sim.run_id(bad)) == "finished:failed"
        assert "unknown method 'nope'" in bad.stdout
    left = [pid for pid in sim.stopped_pids if pid_alive(pid)]
    assert not left, f"processes left running: {left}"
