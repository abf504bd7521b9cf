"""A real deployment survives a SuperLink restart: ``flower-superlink`` with its state database
(``--database``) and two ``flower-supernode`` processes, each keeping its clients' state in its own
folder (``--node-config "client-state-dir=..."``). The project's app runs with ``flwr run``; the
SuperLink (and with it the ServerApp) is killed once the strategy's checkpoint of round k is written,
restarted on the same database and port, the SuperNodes reconnect by themselves, and one
``flwr run ... resume=true`` finishes the run. Its final model equals the uninterrupted run's bit for
bit, for FedAvg (centralized), DFedCata (decentralized) and DO-ADP, whose reported epsilon counts
every round that ran. Killing only the ServerApp process (SCAFFOLD, whose clients keep ``c_i``)
gives the same.

The uninterrupted run is the same app and node configs on an in-process grid
(``tests/test_privacy_doadp_deployment.py`` shows that it repeats a deployment's run bit for bit),
which saves one deployment run per method.

These runs are also the suite's plain deployment runs (centralized, decentralized and low-rank
methods, each configured by ``method=<name>`` in the run config): ``flwr run`` exits 0, the run's
status in ``flwr ls`` is ``finished:completed``, every round after the resume aggregates every
SuperNode with no failure, and the run learns (the model it ends with is the uninterrupted run's,
bit for bit, and that run's accuracy on digits rises from chance to at least 0.5).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from flwr_strategies.core.state import load_state
from flwr_strategies.simulations import app as project_app
from flwr_strategies.simulations.deployment import HOST, FlowerProcesses, LocalDeployment, descendants_of, pid_alive
from flwr_strategies.simulations.experiment import ExperimentConfig
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

ROOT = Path(__file__).resolve().parents[1]
N, ROUNDS, KILL_AFTER = 2, 2, 1
RUN_TIMEOUT_S = 480
#: minutes per method on the shared machine (a flwr-clientapp process per message): select with -m "not slow" to skip
pytestmark = pytest.mark.slow
#: each SuperNode's own DO-ADP settings: a secret seed of 128 bits and a budget of epsilon 1 over the run
NODE_SEEDS = {0: "8f14e45fceea167a5a36dedd4bea2543", 1: "c9f0f895fb98ab9159f51fd0297e236d"}
COMMON = {"num-clients": N, "num-server-rounds": ROUNDS, "dataset": "digits", "seed": 0, "partition": "iid",
          "local-epochs": 1}
RUN_CONFIGS = {
    "fedavg": {"method": "fedavg", **COMMON},
    "dfedcata": {"method": "dfedcata", **COMMON},
    "doadp": {"method": "doadp", **COMMON, "set": "p=0.7,eval_every=1,epsilon=1"},
    "scaffold": {"method": "scaffold", **COMMON},
    "fedli-ls": {"method": "fedli-ls", **COMMON},
    # every SuperNode trains every round (FedMUD's paper default samples a tenth of the clients); the default
    # target_ratio (1/32) is below what the digits model can reach (about 0.28): strict sizing rejects it
    "fedmud": {"method": "fedmud", **COMMON, "fraction-fit": 1.0, "set": "target_ratio=0.3"},
    # settings the app's run config has no key for (model, local steps) go as a whole experiment
    "fedmezo": {"experiment": json.dumps(ExperimentConfig(
        method="fedmezo", num_clients=N, rounds=ROUNDS, seed=0, lr=2e-4, local_epochs=None, local_steps=2,
        batch_size=1, params={"n_examples": 30, "eval_every": 1}, progress=False).to_dict())},
}


#: methods whose 2-round runs must learn (2 private DO-ADP rounds do not train the model)
LEARNS = {"fedavg", "dfedcata", "fedmud"}


def node_config(i: int, state_dir: Path) -> dict:
    return {"partition-id": i, "num-partitions": N, "client-state-dir": str(state_dir),
            "doadp-client-seed": NODE_SEEDS[i], "doadp-epsilon": 1.0, "doadp-rounds": ROUNDS}


class RestartableDeployment(LocalDeployment):
    """:class:`LocalDeployment` whose SuperLink keeps its state in a database file and whose
    SuperNodes keep their clients' state in a folder each (and hold their DO-ADP settings)."""

    def superlink_command(self) -> list[str]:
        return [*super().superlink_command(), "--database", str(self.workdir / "superlink.db")]

    def start(self) -> "RestartableDeployment":
        FlowerProcesses.start(self)
        for i, port in enumerate(self.supernode_ports):
            cfg = node_config(i, self.workdir / f"node-{i}")
            pairs = " ".join(f"{k}='{v}'" if isinstance(v, str) else f"{k}={v}" for k, v in cfg.items())
            self._spawn(f"supernode-{i}", [
                "flower-supernode", "--insecure", "--superlink", self.address, "--node-config", pairs,
                "--host", HOST, "--port", str(port), "--max-wait-time", "300",
            ])
        return self

    def kill(self, pids: set[int]) -> None:
        self.stopped_pids |= set(pids)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def restart_superlink(self) -> None:
        """SIGKILL the SuperLink and everything it started (SuperExec, ServerApp), then start it again
        on the same port and database."""
        self.kill(descendants_of({self.procs["superlink"].pid}))
        self.procs["superlink"].wait(timeout=30)
        self._spawn("superlink", self.superlink_command())
        self.wait_superlink()

    def kill_serverapp(self) -> None:
        """SIGKILL the ``flwr-serverapp`` process (the SuperLink goes on)."""
        pids = [p for p in self.descendants() if b"flwr-serverapp" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert pids, "no flwr-serverapp process is running"
        self.kill(descendants_of(set(pids)))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    dep = RestartableDeployment(num_supernodes=N, workdir=tmp_path_factory.mktemp("restart"))
    try:
        dep.start()
        yield dep
    finally:
        dep.stop()
        for name, proc in dep.procs.items():
            assert proc.poll() is not None, f"{name} (pid {proc.pid}) still running after stop()"
        left = [pid for pid in dep.stopped_pids if pid_alive(pid)]
        assert not left, f"processes left running after stop(): {left}"


def test_free_distinct_ports(deployment):
    ports = [deployment.superlink_port, *deployment.supernode_ports]
    assert len(set(ports)) == len(ports) == N + 1
    assert all(p.poll() is None for p in deployment.procs.values()), deployment.all_logs()


def straight_final(run_config: dict, out: Path, state_dir: Path) -> list[np.ndarray]:
    """The uninterrupted run: the same app and node configs on an in-process grid."""
    rc = {**run_config, "out-dir": str(out)}
    grid = InProcessGrid(project_app.client_app, N, run_config=rc)
    for i, ctx in enumerate(grid.contexts.values()):
        ctx.node_config.update(node_config(i, state_dir))
    project_app.serve(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    return final(out)


def final(out: Path) -> list[np.ndarray]:
    with np.load(out / "final.npz") as f:
        return [f[k] for k in f.files]


def wait_for_checkpoint(out: Path, proc: subprocess.Popen, dep, deadline_s: float = RUN_TIMEOUT_S) -> int:
    path = out / project_app.CHECKPOINT_FILE
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if path.exists():
            done = int(load_state(path)["server_round"])
            if done >= KILL_AFTER:
                return done
        assert proc.poll() is None or path.exists(), f"flwr run ended early:\n{dep.all_logs(2000)}"
        time.sleep(0.2)
    raise TimeoutError(f"no checkpoint of round {KILL_AFTER} after {deadline_s} s:\n{dep.all_logs(2000)}")


def interrupted_then_resumed(dep, method: str, out: Path, interrupt) -> tuple[int, dict]:
    run_config = {**RUN_CONFIGS[method], "out-dir": str(out)}
    offsets = {i: len(dep.log(f"supernode-{i}", tail=10**9)) for i in range(N)}
    first = subprocess.Popen(["flwr", *dep.flwr_run_args(ROOT, run_config)], env=dep.env, cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        done = wait_for_checkpoint(out, first, dep)
        interrupt()
    finally:
        first.kill()
        first.wait(timeout=30)
    res = dep.flwr_run(ROOT, {**run_config, "resume": True}, timeout=RUN_TIMEOUT_S)
    detail = f"rc={res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-2000:]}\n{dep.all_logs(2500)}"
    assert res.returncode == 0, detail
    # `flwr run --stream` exits 0 even when the ServerApp fails: the run's status must say completed
    assert dep.run_status(dep.run_id(res), wait=60) == "finished:completed", detail
    resumed = json.loads((out / "results.json").read_text())
    assert "method" not in run_config or resumed["method"] == run_config["method"]
    after = [r for r in resumed["rounds"] if r["round"]]
    assert [r["round"] for r in after] == list(range(done + 1, ROUNDS + 1)), detail
    for r in after:  # every SuperNode took part in every round after the resume
        assert r["clients"] == N and r["failures"] == 0, (r, resumed["failure_log"])
        assert r["bytes_up"] > 0 and r["bytes_down"] > 0, r
    # every SuperNode really received the train messages of every round, before and after the interruption
    # (Message-API strategies, like Flower's own, send no round number in the message)
    for i in range(N):
        trains = re.findall(r"Receiving: train message", dep.log(f"supernode-{i}", tail=10**9)[offsets[i]:])
        assert len(trains) >= ROUNDS, f"supernode-{i} received {len(trains)} train messages in {ROUNDS} rounds"
    return done, resumed


def check_learns(method: str, out: Path, resumed: dict) -> None:
    """The uninterrupted run (whose final model the resumed deployment's equals bit for bit) rises from
    chance (digits has 10 classes) to at least 0.5 accuracy, and the deployment evaluates its final
    model to the same accuracy."""
    rounds = json.loads((out / "results.json").read_text())["rounds"]
    acc0, acc = rounds[0]["accuracy"], rounds[-1]["accuracy"]
    assert acc >= 0.5 and acc - acc0 >= 0.3, f"{method}: accuracy {acc0:.3f} -> {acc:.3f} in {ROUNDS} rounds"
    assert resumed["rounds"][-1]["accuracy"] == acc, method


@pytest.mark.parametrize("method", ["fedavg", "dfedcata", "doadp"])
def test_superlink_restart_resumes_bit_for_bit(deployment, method, tmp_path):
    done, resumed = interrupted_then_resumed(deployment, method, tmp_path / "run", deployment.restart_superlink)
    reference = straight_final(RUN_CONFIGS[method], tmp_path / "straight", tmp_path / "nodes")
    got = final(tmp_path / "run")
    assert len(got) == len(reference)
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(reference, got)), method
    if method in LEARNS:
        check_learns(method, tmp_path / "straight", resumed)
    straight = json.loads((tmp_path / "straight" / "results.json").read_text())["rounds"][-1]
    eps = {k: v for k, v in straight.items() if k.startswith("fit_dp_epsilon")}
    assert bool(eps) == (method == "doadp")
    assert eps == {k: resumed["rounds"][-1][k] for k in eps}  # the spent epsilon continued, never reset
