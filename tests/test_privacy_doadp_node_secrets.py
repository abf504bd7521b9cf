"""Issue 18, privacy: a DO-ADP client's secrets and consent come from its own node, never from the
server, through the project's app (``simulations/app.py``) and the ready-made clients.

- A client seed in a run config (the server's) is refused on both sides, naming the key.
- A SuperNode's ``doadp-client-seed`` (a secret of at least 128 bits) is honoured by the project's app:
  two runs repeat bit for bit, and no reply says how its noise was seeded. ``--client-seed`` keeps
  working in the project's simulations.
- Each node's budget comes from its node config (``doadp-epsilon``, ``doadp-rounds``); the simulations
  give their nodes the experiment's.
- The private model leaves a node only with that node's consent (``doadp-allow-private-eval``), not
  because the server asks (``report_model = 1``); a seed in a round's config is refused.

``tests/test_privacy_doadp_deployment.py`` shows the same on a real SuperLink with SuperNodes.
"""

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import dataclasses
import json

import numpy as np
import pytest
import torch
from flwr.app import Context, RecordDict

from flwr_strategies.clients.doadp import (
    ClientBudget,
    DOADPClient,
    client_budget_of,
    allow_private_eval,
    client_seed_of,
    flat_parameters,
    private_eval_allowed,
    set_client_seed,
)
from flwr_strategies.clients.doadp_baselines import DPDDAClient
from flwr_strategies.clients.training import TensorData
from flwr_strategies.setup import ClientSetup, SettingError, TrainConfig
from flwr_strategies.simulations import app as project_app
from flwr_strategies.simulations.experiment import ExperimentConfig
from flwr_strategies.simulations.inprocess_grid import InProcessGrid
from flwr_strategies.simulations.runner import run_experiment
from flwr_strategies.simulations.settings import (
    SIMULATED_NODES_ENV,
    experiment_budget,
    simulated_node_config,
    simulated_nodes_env,
)

N, ROUNDS = 3, 2
RUN_CONFIG = {"method": "doadp", "num-clients": N, "num-server-rounds": ROUNDS, "dataset": "digits", "seed": 0}


def node_budget(method: str = "doadp") -> dict:
    """Every node's own budget: the run's default epsilon (and delta, clip) over its rounds, as node config."""
    params = ExperimentConfig(method=method, num_clients=N, rounds=ROUNDS, dataset="digits").validate().params
    return simulated_node_config(None, False, 0, experiment_budget(params, ROUNDS))


BUDGET = node_budget()


def node_seed(pid: int) -> str:
    """A node's own 128-bit secret seed (32 hex digits)."""
    return f"{0x5EED0000_00000000_00000000_00000000 + 7_000_003 + 31 * pid:032x}"


def serve(run_config, node_config=lambda pid: {}, tmp_path=None):
    """The project's ServerApp and ClientApp on an in-process grid; each node gets its budget and
    ``node_config(pid)``."""
    rc = {**run_config, "out-dir": str(tmp_path) if tmp_path else ""}
    grid = InProcessGrid(project_app.client_app, N, run_config=rc)
    for ctx in grid.contexts.values():
        ctx.node_config.update({**BUDGET, **node_config(int(ctx.node_config["partition-id"]))})
    project_app.serve(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    results = json.loads((tmp_path / "results.json").read_text()) if tmp_path else None
    return results, grid


def _final(path):
    with np.load(path / "final.npz") as npz:
        return [npz[k] for k in sorted(npz.files)]


# ------------------------------------------------------------------------------ the run config
@pytest.mark.parametrize("run_config, key", [
    ({**RUN_CONFIG, "client-seed": 5}, "client-seed"),
    ({**RUN_CONFIG, "doadp-client-seed": 5}, "doadp-client-seed"),
    ({"experiment": json.dumps(ExperimentConfig(method="doadp", num_clients=N, rounds=ROUNDS,
                                                client_seed=5).to_dict())}, "client_seed"),
])
def test_run_config_seed_is_refused_on_both_sides(run_config, key):
    with pytest.raises(SettingError, match=f"{key}.*must be absent.*doadp-client-seed"):
        serve(run_config)  # the ServerApp refuses before waiting for nodes
    ctx = Context(run_id=1, node_id=1, node_config={"partition-id": 0, "num-partitions": N}, state=RecordDict(),
                  run_config=run_config)
    with pytest.raises(SettingError, match=f"{key}.*must be absent"):
        project_app.experiment_for(ctx)  # and so does every client
    assert "doadp-secret" not in ctx.state


# ------------------------------------------------------------------------------ the node config
def test_node_config_seed_is_honoured_by_the_projects_app(tmp_path):
    seeds = lambda pid: {"doadp-client-seed": node_seed(pid)}  # noqa: E731
    a, _ = serve(RUN_CONFIG, seeds, tmp_path / "a")
    b, grid = serve(RUN_CONFIG, seeds, tmp_path / "b")
    c, _ = serve(RUN_CONFIG, tmp_path=tmp_path / "c")  # no seed: OS entropy
    for res in (a, b, c):
        assert res["status"] == "completed" and all(r["failures"] == 0 for r in res["rounds"])
        assert not [k for r in res["rounds"] for k in r if "seed" in k or "entropy" in k]  # nothing says how
    # two seeded runs repeat bit for bit; the unseeded one draws other noise
    assert a["rounds"][-1]["loss"] == b["rounds"][-1]["loss"]
    assert all(np.array_equal(x, y) for x, y in zip(_final(tmp_path / "a"), _final(tmp_path / "b")))
    assert not all(np.array_equal(x, y) for x, y in zip(_final(tmp_path / "a"), _final(tmp_path / "c")))
    ctx = grid.contexts[1001]
    assert client_seed_of(ctx.state) == int(node_seed(1), 16)  # the node's own seed, from its node config
    assert not private_eval_allowed(ctx.state)  # and no consent it did not give


def test_a_bad_node_config_seed_is_an_error_naming_the_key():
    with pytest.raises(ValueError, match="doadp-client-seed.*'abc'"):
        client_seed_of(None, {"doadp-client-seed": "abc"})
    with pytest.raises(ValueError, match="doadp-allow-private-eval.*'maybe'"):
        private_eval_allowed(None, {"doadp-allow-private-eval": "maybe"})


def test_client_seed_switch_keeps_working_in_the_simulations(monkeypatch):
    # in process: --client-seed seeds every simulated node (derived per partition on the client side)
    cfg = ExperimentConfig(method="doadp", num_clients=N, rounds=ROUNDS, seed=0, client_seed=11, progress=False)
    r1, r2 = run_experiment(cfg), run_experiment(cfg)
    assert r1["rounds"][-1]["loss"] == r2["rounds"][-1]["loss"]
    assert r1["rounds"][-1]["loss"] != run_experiment(dataclasses.replace(cfg, client_seed=12))["rounds"][-1]["loss"]
    # under --backend ray the nodes get it from the environment the backend sets (never the run config)
    env = simulated_nodes_env(cfg)
    monkeypatch.setenv(SIMULATED_NODES_ENV, env[SIMULATED_NODES_ENV])
    ctx = Context(run_id=1, node_id=5, node_config={"partition-id": 2, "num-partitions": N}, state=RecordDict(),
                  run_config={})
    project_app.adopt_node_settings(ctx)
    assert client_seed_of(ctx.state) == simulated_node_config(11, False, 2)["doadp-client-seed"]
    assert client_budget_of(ctx.state) == client_budget_of(None, BUDGET)  # the experiment's, on the client side
    # a SuperNode's own node config wins over it
    ctx.node_config.update({"doadp-client-seed": node_seed(9), "doadp-epsilon": 0.5, "doadp-rounds": 1})
    project_app.adopt_node_settings(ctx)
    assert client_seed_of(ctx.state) == int(node_seed(9), 16)
    assert client_budget_of(ctx.state) == ClientBudget(epsilon=0.5, rounds=1)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_ray_backend_repeats_the_inprocess_run_with_client_seed(tmp_path):
    # one short Ray run: --client-seed travels in the environment of the private simulation, the
    # experiment in the run config carries none, and the numbers equal the in-process run's
    from flwr_strategies.simulations.backends import run_ray

    cfg = ExperimentConfig(method="doadp", num_clients=N, rounds=ROUNDS, seed=0, client_seed=11, progress=False,
                           dataset="digits", model="logreg")
    ray, _ = run_ray(cfg, workdir=tmp_path, timeout=300)
    local = run_experiment(cfg)
    assert [r["loss"] for r in ray.rounds] == [r["loss"] for r in local["rounds"]]
    assert all(r["failures"] == 0 for r in ray.rounds)


# ------------------------------------------------------------------------------ consent
def _setup(state, n=40, d_in=6):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, d_in, generator=g), torch.randint(0, 3, (n,), generator=g)
    model = torch.nn.Linear(d_in, 3)
    return ClientSetup(0, 1, model, TensorData(x, y), None, TrainConfig(), torch.device("cpu"), 0, state)


def _config(report_model):
    return {"t": 0, "doadp_private": 1, "doadp_alpha": 0.1, "doadp_beta": 0.15, "doadp_p": 1.0, "doadp_k": 5,
            "doadp_sigma": 0.2, "doadp_clip": 1.0, "doadp_clip_mode": "coordinate", "doadp_batch_size": 4,
            "doadp_sampling": "uniform", "doadp_msg_dtype": "float32", "doadp_public_copy": "zero",
            "doadp_accepted": 0, "report_model": report_model}


@pytest.mark.parametrize("consent", [None, "node config", "state", "argument"])
def test_private_model_leaves_only_with_the_nodes_consent(consent):
    state = RecordDict()
    setup = _setup(state)
    kwargs = {}
    if consent == "node config":
        setup.node_config = {"doadp-allow-private-eval": True}
    elif consent == "state":
        allow_private_eval(state)
    elif consent == "argument":
        kwargs["allow_private_eval"] = True
    client = DOADPClient(setup, {}, client_seed=3, budget=ClientBudget(epsilon=100.0, rounds=5), **kwargs)
    x0 = flat_parameters(setup.model)
    arrays, _, _ = client.fit([np.zeros_like(x0), x0], _config(report_model=1))
    sent = len(arrays) == 3
    assert sent == (consent is not None)
    if sent:  # the private model itself, after the Top-k message
        np.testing.assert_array_equal(arrays[2], state["doadp"].to_numpy_ndarrays()[0])  # x after the round
    # the server's request alone never makes a node send it; nor does a round without the request
    arrays, _, _ = client.fit([np.zeros_like(x0)], {**_config(report_model=0), "t": 1, "doadp_accepted": 1})
    assert len(arrays) == 2


@pytest.mark.parametrize("key", ["doadp-client-seed", "client_seed", "client-seed"])
def test_a_round_carrying_a_seed_is_refused(key):
    setup = _setup(RecordDict())
    x0 = flat_parameters(setup.model)
    with pytest.raises(ValueError, match=f"carries '{key}'.*never from the server"):
        DOADPClient(setup, {}).fit([np.zeros_like(x0), x0], {**_config(0), key: 5})
    with pytest.raises(ValueError, match=f"carries '{key}'"):
        DPDDAClient(setup, {}).fit([np.zeros_like(x0), x0], {"t": 0, key: 5})


@pytest.mark.parametrize("method", ["doadp", "dp-dda", "dpdo", "cpgt"])
def test_baseline_and_doadp_clients_follow_the_consent(method, tmp_path):
    # through the project's app: the server asks every round (eval_every=1); only consenting nodes answer
    rc = {**RUN_CONFIG, "method": method, "set": "evaluate_private=true,eval_every=1"}
    replies = {}

    class Spy(InProcessGrid):
        def pull_messages(self, ids):
            out = list(super().pull_messages(ids))
            for m in out:
                if not m.has_error() and "arrays" in m.content:
                    pid = int(m.content["metrics"]["partition-id"])
                    replies.setdefault(pid, []).append(len(m.content["arrays"]))
            return out

    grid = Spy(project_app.client_app, N, run_config=rc)
    for ctx in grid.contexts.values():
        ctx.node_config.update(node_budget(method))
    grid.contexts[1001].node_config["doadp-allow-private-eval"] = True  # only partition 1 consents
    project_app.serve(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    assert replies, "no reply reached the server"
    sizes = {pid: set(v) for pid, v in replies.items()}
    base = min(min(v) for v in sizes.values())
    assert sizes[1] == {base + 1}  # the consenting node adds its private model every round
    assert all(v == {base} for pid, v in sizes.items() if pid != 1)  # the others send their messages only


def test_inprocess_simulation_consents_for_its_own_nodes():
    # the experimenter runs every simulated node: evaluate_private is their consent in the project's simulations
    cfg = ExperimentConfig(method="doadp", num_clients=N, rounds=ROUNDS, seed=0, client_seed=2, progress=False,
                           params={"evaluate_private": True, "eval_every": 1})
    res = run_experiment(cfg)
    assert all(r["failures"] == 0 and "private_xbar_accuracy" in r for r in res["rounds"][1:])
    assert json.loads(simulated_nodes_env(cfg)[SIMULATED_NODES_ENV]) == {
        "client_seed": 2, "allow_private_eval": True,
        "budget": experiment_budget(cfg.validate().params, ROUNDS)}


def test_agent_in_your_own_client_app_takes_the_nodes_settings():
    # the drop-in route: DOADPAgent(arrays, config, context.state, node_config=context.node_config)
    from flwr_strategies.clients.doadp import DOADPAgent

    setup = _setup(RecordDict())
    x0 = flat_parameters(setup.model)
    outs = []
    budget = ClientBudget(epsilon=100.0, rounds=5)
    for kwargs in ({"node_config": {"doadp-client-seed": node_seed(0), "doadp-allow-private-eval": "true",
                                    "doadp-epsilon": 100.0, "doadp-rounds": 5}},
                   {"client_seed": int(node_seed(0), 16), "allow_private_eval": True, "budget": budget},
                   {"budget": budget}):
        agent = DOADPAgent([np.zeros_like(x0), x0], _config(report_model=1), RecordDict(), **kwargs)
        outs.append(agent.train(setup.model, setup.train_data, torch.nn.functional.cross_entropy))
    (a, ma), (b, mb), (c, mc) = outs
    assert ma.keys() == mb.keys() == mc.keys()  # the metrics say nothing about how the noise was seeded
    assert len(a) == len(b) == 3 and len(c) == 2  # the private model only with consent
    assert all(np.array_equal(u, v) for u, v in zip(a, b))  # the node-config seed is the seed
