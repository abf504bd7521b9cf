"""Issue 18, privacy done-when 1, on a real deployment: ``flower-superlink`` and two
``flower-supernode`` processes (127.0.0.1, insecure), the project's app submitted with ``flwr run``.

- A run config that carries a client seed is refused: the run ends ``finished:failed`` and the error
  names the key (the issue's attack: ``client_seed=5`` seeded every client's noise).
- Each SuperNode's own ``--node-config "doadp-client-seed='<32 hex digits>'"`` (a secret of at least
  128 bits) is honoured by the project's app: the same app on an in-process grid with the same node
  configs repeats the deployment's run bit for bit (every round's numbers and the final model), and
  no reply says how its noise was seeded.
- Issue 26: each SuperNode's own budget (``doadp-epsilon``, ``doadp-rounds``) is what its client checks
  the server's noise against: a run whose run config (the server's) asks for epsilon 20 is refused by
  every node, naming the server's sigma and the one the node's budget needs; a SuperNode whose node
  config seed is small (the issue's 11) refuses to train.
- Issue 26: a user's ServerApp (``tests/fixtures/doadp-budget``: Flower's ``start()`` on the Message-API
  ``DOADP`` with an ``AmplifiedAccountant`` whose ``max_epsilon`` covers one of the two planned rounds)
  stops with Flower's ``PrivacyBudgetExhausted`` before round 2: the run reads ``finished:failed``, its
  log names the budget, and the epsilon the accountant reports is that of the one round that ran
  (recomputed independently from the mechanism's sigma, clip, batch and record count).
- The server cannot regenerate any noise: from everything it sends, receives and holds (every message
  of the run, its run config, its results), no generator it can build reproduces one of the noise
  vectors the clients applied; with the nodes' seeds, the same attack reproduces all of them.
"""

from __future__ import annotations

import copy
import itertools
import json
import time
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, RecordDict

import flwr_strategies.doadp.algorithm as algorithm
from flwr_strategies.doadp.rng import agent_generator, draw_batch
from flwr_strategies.privacy import GaussianSteps
from flwr_strategies.simulations import app as project_app
from flwr_strategies.simulations.deployment import HOST, FlowerProcesses, LocalDeployment, pid_alive
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
from flwr_strategies.simulations.inprocess_grid import InProcessGrid
from flwr_strategies.simulations.settings import simulated_node_config

ROOT = Path(__file__).resolve().parents[1]
BUDGET_APP = ROOT / "tests" / "fixtures" / "doadp-budget"
N, ROUNDS = 2, 2
#: each SuperNode's own secret seed of 128 bits (its operator's; the server never sees it)
NODE_SEEDS = {0: "8f14e45fceea167a5a36dedd4bea2543", 1: "c9f0f895fb98ab9159f51fd0297e236d"}
#: each SuperNode's own privacy budget: epsilon 1 over the run's rounds
NODE_BUDGET = "doadp-epsilon=1.0 doadp-rounds=2"
RUN_CONFIG = {"method": "doadp", "num-clients": N, "num-server-rounds": ROUNDS, "dataset": "digits", "seed": 0,
              "partition": "iid", "set": "p=0.7,eval_every=1,epsilon=1"}  # the nodes' own budget: epsilon 1
RUN_TIMEOUT_S = 420


class SeededDeployment(LocalDeployment):
    """:class:`LocalDeployment` whose SuperNode ``i`` also gets its budget and ``doadp-client-seed=NODE_SEEDS[i]``."""

    def start(self) -> "SeededDeployment":
        FlowerProcesses.start(self)
        for i, port in enumerate(self.supernode_ports):
            self._spawn(f"supernode-{i}", [
                "flower-supernode", "--insecure", "--superlink", self.address,
                "--node-config", f"partition-id={i} num-partitions={N} doadp-client-seed='{NODE_SEEDS[i]}' "
                                 f"{NODE_BUDGET}",
                "--host", HOST, "--port", str(port), "--max-wait-time", str(int(self.startup_timeout)),
            ])
        return self


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    dep = SeededDeployment(num_supernodes=N, workdir=tmp_path_factory.mktemp("doadp-deployment"))
    try:
        dep.start()
        yield dep
    finally:
        dep.stop()
        left = [pid for pid in dep.stopped_pids if pid_alive(pid)]
        assert not left, f"processes left running after stop(): {left}"


def _latest_status(dep) -> str:
    ls = dep.flwr("ls", "deploy", "--format", "json", timeout=60)
    runs = json.loads(ls.stdout[ls.stdout.index("{"):])["runs"]
    return max(runs, key=lambda r: r["pending-at"])["status"]


def test_run_config_seed_is_refused(deployment, tmp_path):
    cfg = ExperimentConfig(method="doadp", dataset="digits", num_clients=N, rounds=ROUNDS, seed=0, client_seed=5)
    res = deployment.flwr_run(ROOT, {"experiment": json.dumps(cfg.to_dict()), "out-dir": str(tmp_path)},
                              timeout=RUN_TIMEOUT_S)
    log = f"{res.stdout}\n{res.stderr}\n{deployment.log('superlink', 20000)}"
    assert _latest_status(deployment) == "finished:failed", log[-3000:]
    assert "'client_seed' must be absent" in log and "doadp-client-seed" in log, log[-3000:]
    assert not (tmp_path / "results.json").exists()  # no round ran


class WireGrid(InProcessGrid):
    """An in-process grid that records every message crossing the wire (the server's whole view)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.sent, self.received = [], []

    def push_messages(self, messages):
        messages = list(messages)
        self.sent.extend(messages)
        return super().push_messages(messages)

    def pull_messages(self, ids):
        out = list(super().pull_messages(ids))
        # copies as they crossed the wire: a decentralized strategy empties the arrays of the replies
        # its tables have taken (Flower's start() would otherwise keep them for a round)
        self.received.extend(copy.deepcopy(m) for m in out)
        return out


def _integers(obj, out: set[int]) -> set[int]:
    """Every integer (or integral float) in a JSON-like object."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            _integers(k, out)
            _integers(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _integers(v, out)
    elif isinstance(obj, (int, float, np.integer, np.floating)) and not isinstance(obj, bool):
        if np.isfinite(obj) and float(obj).is_integer() and 0 <= obj < 2**63:
            out.add(int(obj))
    elif isinstance(obj, str):
        for tok in obj.replace(",", " ").replace("=", " ").split():
            if tok.isdigit():
                out.add(int(tok))
    return out


def _wire_integers(grid) -> set[int]:
    seen: set[int] = set()
    for msg in grid.sent + grid.received:
        seen.update({int(msg.metadata.dst_node_id), int(msg.metadata.src_node_id)})
        if msg.has_error():
            continue
        for rec in list(msg.content.config_records.values()) + list(msg.content.metric_records.values()):
            _integers(dict(rec), seen)
        for rec in msg.content.array_records.values():
            for a in rec.to_numpy_ndarrays():
                if a.dtype.kind in "iu" and a.size:
                    seen.update(int(v) for v in a.ravel()[:64])
    return seen


def _regenerated(noises, seeds, rounds, qs, b) -> int:
    """How many of the clients' noise vectors a generator seeded from ``seeds`` reproduces, replaying the
    client's draw order (coin, batch, noise) with the project's generators and with plain ones."""
    def makers(s, t):
        return [lambda: agent_generator(s, t), lambda: np.random.default_rng(s), lambda: np.random.default_rng([s, t])]

    guesses = []
    for s, t in itertools.product(sorted(seeds), range(rounds)):
        for make in makers(s, t):
            for q in qs:
                g = make()
                g.random()
                draw_batch(g, q, b)
                guesses.append(g.normal(0.0, 1.0, size=8))
    guesses = np.array(guesses)
    hits = 0
    for noise in noises:
        ratio = noise[:8] / guesses  # the same standard normals, scaled by sigma
        hits += bool(np.any(np.all(np.isclose(ratio, ratio[:, :1], rtol=1e-9), axis=1)))
    return hits


def test_node_config_seed_is_honoured_and_the_server_cannot_regenerate_noise(deployment, tmp_path, monkeypatch):
    out = tmp_path / "deployment"
    t0 = time.perf_counter()
    res = deployment.flwr_run(ROOT, {**RUN_CONFIG, "out-dir": str(out)}, timeout=RUN_TIMEOUT_S)
    detail = f"rc={res.returncode} after {time.perf_counter() - t0:.0f} s\n{res.stdout[-3000:]}\n{deployment.all_logs(1500)}"
    assert _latest_status(deployment) == "finished:completed", detail
    deployed = json.loads((out / "results.json").read_text())
    rounds = deployed["rounds"]
    assert [r["round"] for r in rounds] == list(range(ROUNDS + 1)), detail
    assert all(r["failures"] == 0 for r in rounds), rounds  # every node accepted the server's noise
    assert not [k for r in rounds for k in r if "seed" in k or "entropy" in k], rounds[-1]  # nothing says how

    # the same app on an in-process grid, each node with the same node config: the same run, bit for bit
    noises = []
    real = algorithm.noisy_gradient

    def spy(grads, params, rng, d):  # the noise the clients apply (client side only, never sent)
        g, noise = real(grads, params, rng, d)
        noises.append(noise.copy())
        return g, noise

    monkeypatch.setattr(algorithm, "noisy_gradient", spy)
    rc = {**RUN_CONFIG, "out-dir": str(tmp_path / "again")}
    grid = WireGrid(project_app.client_app, N, run_config=rc)
    for ctx in grid.contexts.values():
        ctx.node_config.update({"doadp-client-seed": NODE_SEEDS[int(ctx.node_config["partition-id"])],
                                "doadp-epsilon": 1.0, "doadp-rounds": ROUNDS})
    project_app.serve(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    keys = [k for k in rounds[-1] if k not in ("wall_s", "elapsed_s")]
    assert [[r.get(k) for k in keys] for r in again["rounds"]] == [[r.get(k) for k in keys] for r in rounds]
    with np.load(out / "final.npz") as a, np.load(tmp_path / "again" / "final.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        assert all(np.array_equal(a[k], b[k]) for k in a.files)

    # the server's view: every message of the run, its run config and everything it wrote
    candidates = _wire_integers(grid) | _integers(RUN_CONFIG, set()) | _integers(deployed, set()) | set(range(64))
    seeds = {int(v, 16) for v in NODE_SEEDS.values()}
    assert not candidates & seeds, "a node's seed reached the server"
    # ... and every seed the project's own --client-seed derivation makes from those numbers
    derived = {simulated_node_config(c, False, p)["doadp-client-seed"] for c in candidates if c < 2**32 for p in range(N)}
    qs = sorted({int(m.content["metrics"]["num-examples"]) for m in grid.received
                 if not m.has_error() and "num-examples" in m.content["metrics"]})
    b = next(int(m.content["config"]["doadp_batch_size"]) for m in grid.sent
             if "config" in m.content and "doadp_batch_size" in m.content["config"])
    assert noises and len(noises) == sum(r["fit_active"] for r in rounds[1:])
    assert _regenerated(noises, candidates | derived, ROUNDS, qs, b) == 0
    # control: the attack is able to succeed; with the nodes' own seeds it reproduces every vector
    assert _regenerated(noises, seeds, ROUNDS, qs, b) == len(noises)


def test_a_server_asking_for_less_noise_than_the_nodes_budget_is_refused(deployment, tmp_path):
    # the run config is the server's: it targets epsilon 20, so its sigma is below what each node's
    # own budget (epsilon 1 over 2 rounds, its node config) needs; every node refuses every round. One
    # round shows it (each refused round cost about 60 s on two loaded cores: a ClientApp process per node)
    out = tmp_path / "weak"
    res = deployment.flwr_run(ROOT, {**RUN_CONFIG, "num-server-rounds": 1, "out-dir": str(out),
                                     "set": "p=0.7,eval_every=1,epsilon=20,calibration=accountant"},
                              timeout=RUN_TIMEOUT_S)
    log = f"{res.stdout}\n{res.stderr}\n{deployment.all_logs(20000)}"
    assert "DO-ADP client refuses the round: the server's sigma=" in log, log[-4000:]
    assert "its own budget needs sigma >= " in log, log[-4000:]
    if (out / "results.json").exists():  # the run may also stop for lack of progress; no update ever applied
        rounds = json.loads((out / "results.json").read_text())["rounds"]
        assert all(r["failures"] == N for r in rounds[1:]), rounds


def test_max_epsilon_stops_a_deployed_run_before_the_round_that_would_pass_it(deployment, tmp_path):
    cfg = ExperimentConfig(method="doadp", dataset="digits", num_clients=N, rounds=ROUNDS, seed=0,
                           params={"p": 0.7, "eval_every": 1, "epsilon": 1.0})  # the nodes' own budget
    exp = get_experiment(cfg.validate())
    plan = exp.spec.message_strategy(exp.server_setup(), dict(exp.params)).build_core(
        [a.copy() for a in exp.initial_parameters], N)
    mech, delta = plan.mechanism(), plan.config.delta
    one, two = mech.epsilon(1, delta), mech.epsilon(2, delta)
    limit = (one + two) / 2  # covers round 1, not round 2
    out = tmp_path / "budget"
    out.mkdir()
    res = deployment.flwr_run(BUDGET_APP, {"experiment": json.dumps(cfg.to_dict()), "max-epsilon": limit,
                                           "out-dir": str(out)}, timeout=RUN_TIMEOUT_S)
    log = f"{res.stdout}\n{res.stderr}\n{deployment.all_logs(20000)}"
    assert _latest_status(deployment) == "finished:failed", log[-4000:]
    assert "PrivacyBudgetExhausted" in log and f"round 2 would exceed max_epsilon={limit:g}" in log, log[-4000:]
    spent = json.loads((out / "privacy.json").read_text())
    assert spent["server_round"] == 1 and spent["num_releases"] == 1, spent  # round 1 ran and is counted
    ran = GaussianSteps(spent["sigma"], spent["clip"], spent["batch_size"], spent["dataset_size"], spent["sampling"])
    assert spent["epsilon"] == pytest.approx(ran.epsilon(1, delta), rel=1e-12) and spent["delta"] == delta
    assert spent["epsilon"] == pytest.approx(one, rel=1e-12) and one <= limit < two
    assert spent["accounting_method"].startswith("DO-ADP"), spent
