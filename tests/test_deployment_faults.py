"""Faults in real Flower runs end with the failure recorded and a status that says so (issue 18).

- A real deployment (``flower-superlink`` + three ``flower-supernode`` processes): one SuperNode is
  killed after round 1. Under FedAvg and DFedCata the run must record the dead node's failures and
  end either failed (Flower's ``finished:failed``) or with the ServerApp's ``degraded`` status,
  never as a plain ``completed`` run with 0 failures.
- The ``ray`` backend through the CLI, run the way an IDE or cron runs it (the venv's Flower CLI
  not on ``PATH``): a ClientApp that hangs in round 2 ends the CLI with exit status 1 within the
  backend's limits, and results.json keeps the rounds and says ``failed``.

- Issue 29: after the kill, DFedCata's later rounds leave the dead node out (they send it nothing to wait for).

Each real deployment costs one to five minutes on two shared cores: the runs are 3 or 4 short rounds.
One killed-node run per method serves every test that reads it (DFedCata's 4-round run is both the
status test's and issue 29's).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from flwr_strategies.simulations.deployment import LocalDeployment, descendants_of, pid_alive
from flwr_strategies.simulations.experiment import ExperimentConfig

ROOT = Path(__file__).resolve().parents[1]
NUM_SUPERNODES = 3
ROUNDS = 3
KILL_AFTER_ROUND = 1
RUN_TIMEOUT_S = 300


def _results(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _kill_supernode(dep: LocalDeployment, i: int) -> None:
    proc = dep.procs[f"supernode-{i}"]
    victims = descendants_of({proc.pid})  # its ClientApp processes run in their own sessions
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=10)


def _run_and_kill(method: str, tmp_path: Path, rounds: int = ROUNDS, client_timeout: float = 60.0,
                  run_timeout: float = RUN_TIMEOUT_S) -> tuple[str, dict, str]:
    out = tmp_path / "out"
    # the whole experiment as JSON (the app's `experiment` key) for the settings pyproject.toml does not list
    experiment = ExperimentConfig(method=method, dataset="digits", num_clients=NUM_SUPERNODES, rounds=rounds, seed=0,
                                  partition="iid", fraction_fit=1.0, local_steps=2, client_timeout=client_timeout,
                                  progress=False)
    run_config = {"experiment": json.dumps(experiment.to_dict()), "out-dir": str(out)}
    dep = LocalDeployment(num_supernodes=NUM_SUPERNODES, workdir=tmp_path / "deployment")
    try:
        dep.start()
        log = open(tmp_path / "flwr-run.log", "wb")
        proc = subprocess.Popen(["flwr", *dep.flwr_run_args(ROOT, run_config)], env=dep.env, cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + run_timeout
        while time.monotonic() < deadline and proc.poll() is None:
            done = [r["round"] for r in _results(out / "results.json").get("rounds", []) if "wall_s" in r]
            if done and max(done) >= KILL_AFTER_ROUND:
                _kill_supernode(dep, 1)
                break
            time.sleep(0.2)
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        text = (tmp_path / "flwr-run.log").read_text(errors="replace")
        status = dep.run_status(dep.run_id(text)) if "started run" in text else "not started"
        return status, _results(out / "results.json"), f"{text[-3000:]}\n{dep.all_logs(2000)}"
    finally:
        dep.stop()
        left = [pid for pid in dep.stopped_pids if pid_alive(pid)]
        assert not left, f"processes left running: {left}"


#: the killed-node run of each method: FedAvg 3 rounds (two after the kill: a partition whose last two rounds
#: failed is lost); DFedCata 4 rounds (the round that finds the node dead and two later ones) with a per-round
#: timeout of 3 x 30 s,
#: above the rounds' 20 to 60 s on two shared cores (issue 29's test times its rounds)
KILLED_RUNS = {"fedavg": {"rounds": ROUNDS, "client_timeout": 60.0},
               "dfedcata": {"rounds": 4, "client_timeout": 30.0, "run_timeout": 900}}


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """``killed_run(method)``: ``_run_and_kill`` with the method's :data:`KILLED_RUNS` settings, run once
    per module (a real deployment with a killed SuperNode costs minutes)."""
    runs: dict[str, tuple[str, dict, str]] = {}

    def get(method: str) -> tuple[str, dict, str]:
        if method not in runs:
            runs[method] = _run_and_kill(method, tmp_path_factory.mktemp(f"killed-{method}"), **KILLED_RUNS[method])
        return runs[method]

    return get


@pytest.mark.parametrize("method", ["fedavg", "dfedcata"])
def test_killed_supernode_is_recorded_and_the_run_does_not_end_as_a_success(method, killed_run):
    status, results, detail = killed_run(method)
    assert results, detail
    print(f"{method}: Flower {status}, ServerApp {results['status']!r} {results.get('error', '')!r}, failures per "
          f"round {[r['failures'] for r in results['rounds']]}")
    rounds = {r["round"]: r for r in results["rounds"]}
    # the node was there until the kill
    assert all(rounds[r]["failures"] == 0 and rounds[r]["clients"] == NUM_SUPERNODES
               for r in range(1, KILL_AFTER_ROUND + 1)), detail
    after = [rounds[r] for r in rounds if r > KILL_AFTER_ROUND]
    # the dead node's failures are recorded ...
    assert after and sum(r["failures"] for r in after) >= 1, (results["failure_log"], detail)
    assert any(e["round"] > KILL_AFTER_ROUND for e in results["failure_log"]), detail
    # ... and the run ends failed or degraded, never as a plain success
    if status == "finished:completed":
        assert results["status"].startswith("degraded"), (results["status"], detail)
        assert results["summary"]["lost_partitions"] == {"1": KILL_AFTER_ROUND + 1}, results["summary"]
    else:
        assert status == "finished:failed" and results["status"] == "failed", (status, results["status"], detail)


def test_a_killed_supernode_costs_one_round_not_every_later_round(killed_run):
    """Issue 29: DFedCata after a SuperNode is killed. The round that sends to the dead node waits
    for it (until Flower's SuperLink answers for it, once its heartbeats have been missing for up to
    60 s, or until the round's timeout); the later rounds send it nothing, so they cannot wait for it:
    each logs the dead partition as left out (a failed peer) rather than as a reply that did not come.
    This is checked on the failure log, not on the rounds' wall times, which follow the machine's
    load. The per-round timeout is 3 x 30 s, above the rounds' 20 to 60 s on two shared cores."""
    rounds, client_timeout = KILLED_RUNS["dfedcata"]["rounds"], KILLED_RUNS["dfedcata"]["client_timeout"]
    status, results, detail = killed_run("dfedcata")
    assert results, detail
    wall = {r["round"]: r["wall_s"] for r in results["rounds"] if r["round"] > 0 and "wall_s" in r}
    before = [wall[r] for r in range(1, KILL_AFTER_ROUND + 1)]
    found = wall.get(KILL_AFTER_ROUND + 1)
    later = [wall[r] for r in range(KILL_AFTER_ROUND + 2, rounds + 1) if r in wall]
    mean_before = sum(before) / len(before)
    print(f"dfedcata: Flower {status}, ServerApp {results['status']!r}; round wall_s before the kill {before}, the "
          f"round that found the node dead {found}, later rounds {later}; mean of the remaining rounds / mean before "
          f"= {(found + sum(later)) / (1 + len(later)) / mean_before:.2f}")
    assert len(later) == rounds - KILL_AFTER_ROUND - 1, detail
    # the round that found it waited at most the round's timeout on top of a round
    assert found <= client_timeout * NUM_SUPERNODES + max(before), (before, found)
    # the dead partition is a logged failure in every round from the kill on: the round that found it
    # sent to it and got no answer; every later round left it out, i.e. sent it nothing to wait for
    dead = {}
    for e in results["failure_log"]:
        if e["error"].startswith("partition 1:"):
            dead.setdefault(e["round"], []).append(e["error"])
    assert sorted(dead) == list(range(KILL_AFTER_ROUND + 1, rounds + 1)), results["failure_log"]
    assert not any("left out" in text for text in dead[KILL_AFTER_ROUND + 1]), dead
    for rnd in range(KILL_AFTER_ROUND + 2, rounds + 1):
        assert dead[rnd] and all(" left out, " in text for text in dead[rnd]), (rnd, dead)
    after = [r["failures"] for r in results["rounds"] if r["round"] > KILL_AFTER_ROUND]
    assert after == [1] * (rounds - KILL_AFTER_ROUND), results["rounds"]
    assert status == "finished:completed" and results["status"].startswith("degraded"), (status, results["status"])


HANGING_APP = textwrap.dedent('''
    """The project's ClientApp, except that partition 1 never returns from round 2's train message."""
    import time

    from flwr_strategies.simulations.app import ProjectClientApp


    class HangingClientApp(ProjectClientApp):
        def __call__(self, message, context):
            if (message.metadata.message_type == "train" and context.node_config["partition-id"] == 1
                    and int(message.content["config"]["server-round"]) == 2):
                time.sleep(10**6)
            return super().__call__(message, context)


    client_app = HangingClientApp()
''')


@pytest.mark.ray
def test_hung_ray_client_ends_the_cli_nonzero_without_an_activated_venv(tmp_path, monkeypatch, capsys):
    import flwr_strategies.simulations.backends as backends
    from flwr_strategies.simulations import cli

    real_write_app_dir = backends.write_app_dir

    def hanging_app_dir(folder, **kwargs):
        app = real_write_app_dir(folder, clientapp="hanging_app:client_app")
        (app / "hanging_app.py").write_text(HANGING_APP)
        return app

    monkeypatch.setattr(backends, "write_app_dir", hanging_app_dir)
    monkeypatch.setattr(backends, "RAY_FINISH_GRACE_S", 15.0)
    # as an IDE or cron runs <venv>/bin/python: the venv's bin folder (Flower's CLI) is not on PATH
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("RAY_ADDRESS", "local")
    t0 = time.perf_counter()
    code = cli.main(["run", "--method", "fedavg", "--backend", "ray", "--num-clients", "3", "--rounds", "2",
                     "--local-steps", "2", "--client-cpus", "2", "--client-timeout", "15", "--quiet",
                     "--out", str(tmp_path / "out")])
    wall = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert code == 1, err[-3000:]
    assert "the Flower CLI" not in err
    assert "`flwr run` had not returned 15 s later" in err, err[-3000:]
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["status"].startswith("failed: ")
    assert [r["round"] for r in saved["rounds"]] == [0, 1, 2]
    # bounded: start-up, two rounds (round 2 waits 3 x 15 s for the hung client) and the 15 s grace. A 5 s
    # client timeout failed round 1 in CI (four test workers on two cores: the Ray actor's start-up and
    # the three clients took over 3 x 5 s), so the run stopped with NoProgressError instead of hanging
    assert wall < backends.RAY_STARTUP_S, wall


def test_flower_cli_is_found_beside_the_interpreter_without_an_activated_venv(monkeypatch, tmp_path):
    """Issue 20: ``<venv>/bin/python -m flwr_strategies.simulations`` (an IDE, a notebook, cron)
    finds the venv's ``flwr``/``flower-superlink`` and gives them to every Flower process."""
    import shutil
    import sys

    from flwr_strategies.simulations.deployment import FLOWER_CLI, deployment_env, flower_cli_available

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert not any(shutil.which(c) for c in FLOWER_CLI)  # what failed before
    assert flower_cli_available()
    env = deployment_env(tmp_path)
    bindir = os.path.dirname(os.path.abspath(sys.executable))
    assert env["PATH"].split(os.pathsep)[0] == bindir and env["PATH"].endswith("/usr/bin:/bin")
    for c in FLOWER_CLI:
        assert shutil.which(c, path=env["PATH"]) == os.path.join(bindir, c)
