"""A ServerApp killed after round k and resumed in a new Flower run ends bit-identical to the
straight run, for every method family: the project's ServerApp and ClientApp (the code ``flwr run``
runs) on an in-process grid, where a new grid is a new Flower run (every node's ``context.state``
starts empty), and the nodes keep their clients' state in their own folder (clients/store.py).

The ServerApp is killed at the end of round k + 1, before that round's checkpoint is written: the
nodes have trained round k + 1 already, and the resume must restore their state of round k.
``tests/test_resume_flwr_run.py`` does the same with real ``flwr run`` processes for two families.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import Context, RecordDict

import flwr_strategies
from flwr_strategies.clients.store import MARKER, STATE_DIR_KEY
from flwr_strategies.core.state import load_state
from flwr_strategies.simulations import app as project_app
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

ROUNDS, KILLED_AFTER, NODES = 4, 2, 3
SMALL = dict(dataset="digits", model="logreg", num_clients=NODES, rounds=ROUNDS, seed=0, local_steps=2, batch_size=8,
             progress=False)
FAMILIES = {
    "fedavg": ExperimentConfig(method="fedavg", **SMALL),
    "scaffold": ExperimentConfig(method="scaffold", **SMALL),
    "fedli-ls": ExperimentConfig(method="fedli-ls", **SMALL),
    "fedmud": ExperimentConfig(method="fedmud", fraction_fit=1.0, params={"target_ratio": 0.3},
                               **{**SMALL, "model": "mlp"}),
    "dfedcata": ExperimentConfig(method="dfedcata", **SMALL),
    "doadp": ExperimentConfig(method="doadp", **{**SMALL, "local_steps": 1}),
    "fedmezo": ExperimentConfig(method="fedmezo", num_clients=NODES, rounds=ROUNDS, lr=2e-4, local_epochs=None,
                                local_steps=2, batch_size=1, params={"n_examples": 30, "eval_every": 1},
                                progress=False),
}


class Killed(BaseException):
    """The ServerApp process dies (not an error the app handles)."""


def configure_nodes(grid: InProcessGrid, resolved: ExperimentConfig, state_dir) -> None:
    """Each node's own settings: its client-state folder (None: none) and, for DO-ADP, its budget and
    secret seed."""
    for ctx in grid.contexts.values():
        if state_dir is not None:
            ctx.node_config[STATE_DIR_KEY] = str(state_dir)
        if "epsilon" in resolved.params:  # DO-ADP's nodes: their own budget and secret seed
            pid = int(ctx.node_config["partition-id"])
            ctx.node_config.update({"doadp-epsilon": float(resolved.params["epsilon"]), "doadp-rounds": resolved.rounds,
                                    "doadp-client-seed": format(2**127 + 7919 * pid, "032x")})


def _serve(cfg: ExperimentConfig, out, state_dir, *, resume=False, kill_at=None, monkeypatch=None):
    rc = {"experiment": json.dumps(cfg.to_dict()), "out-dir": str(out), "resume": resume}
    grid = InProcessGrid(project_app.client_app, NODES, run_config=rc)  # a new Flower run: empty context.state
    resolved = cfg.resolve()
    configure_nodes(grid, resolved, state_dir)
    if kill_at is not None:
        original = project_app.RunReport.__call__

        def dies(report, record):
            if int(record["round"]) == kill_at:
                raise Killed(f"ServerApp killed at the end of round {kill_at}")
            original(report, record)

        monkeypatch.setattr(project_app.RunReport, "__call__", dies)
    server = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc)
    try:
        project_app.serve(grid, server)
    finally:
        monkeypatch.undo()
    return grid


def _final(out):
    with np.load(out / "final.npz") as f:
        return [f[k] for k in f.files]


@pytest.mark.parametrize("method", list(FAMILIES))
def test_killed_and_resumed_in_a_new_run_equals_the_straight_run(method, tmp_path, monkeypatch):
    cfg = FAMILIES[method]
    _serve(cfg, tmp_path / "straight", tmp_path / "nodes-a", monkeypatch=monkeypatch)
    with pytest.raises(Killed):
        _serve(cfg, tmp_path / "run", tmp_path / "nodes-b", kill_at=KILLED_AFTER + 1, monkeypatch=monkeypatch)
    assert load_state(tmp_path / "run" / project_app.CHECKPOINT_FILE)["server_round"] == KILLED_AFTER
    grid = _serve(cfg, tmp_path / "run", tmp_path / "nodes-b", resume=True, monkeypatch=monkeypatch)
    straight, resumed = _final(tmp_path / "straight"), _final(tmp_path / "run")
    assert len(straight) == len(resumed)
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(straight, resumed)), method
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert [r["round"] for r in saved["rounds"] if r["round"]] == list(range(KILLED_AFTER + 1, ROUNDS + 1))
    # a private method's spent epsilon continues from the checkpoint: the resumed run reports what the straight
    # run reports after its last round (every step that ran), not the epsilon of its own rounds only
    spent = json.loads((tmp_path / "straight" / "results.json").read_text())["rounds"][-1]
    eps = {k: v for k, v in spent.items() if k.startswith("fit_dp_epsilon")}
    assert bool(eps) == (method == "doadp"), eps
    assert eps == {k: saved["rounds"][-1][k] for k in eps}
    restored = {int(ctx.state[MARKER]["round"]) for ctx in grid.contexts.values() if MARKER in ctx.state}
    kept = any((tmp_path / "nodes-b").rglob("round-*.npz"))
    assert restored == ({KILLED_AFTER} if kept else {0}), (method, restored, kept)


def test_a_resume_whose_nodes_kept_no_state_is_refused_naming_it(tmp_path, monkeypatch):
    # SCAFFOLD's c_i lives in context.state; a new Flower run starts it empty. Without a folder on the
    # nodes the resumed clients refuse every round instead of silently restarting c_i from zero.
    cfg = FAMILIES["scaffold"]
    with pytest.raises(Killed):
        _serve(cfg, tmp_path / "run", None, kill_at=KILLED_AFTER + 1, monkeypatch=monkeypatch)
    with pytest.raises(flwr_strategies.NoProgressError,
                       match=r"resumes a checkpoint of round 2, in which partition [0-2] had trained, but the node "
                       r"kept no client state for it: its client keeps scaffold_c_i .*client-state-dir"):
        _serve(cfg, tmp_path / "run", None, resume=True, monkeypatch=monkeypatch)


def test_the_nodes_keep_two_rounds_of_their_own_state_and_never_their_settings(tmp_path, monkeypatch):
    _serve(FAMILIES["doadp"], tmp_path / "run", tmp_path / "nodes", monkeypatch=monkeypatch)
    folders = sorted((tmp_path / "nodes").glob("*/partition-*"))
    assert [f.name for f in folders] == [f"partition-{p}" for p in range(NODES)]
    for folder in folders:
        assert sorted(p.name for p in folder.iterdir()) == [f"round-{ROUNDS - 1}.npz", f"round-{ROUNDS}.npz"]
        kept = load_state(folder / f"round-{ROUNDS}.npz")
        # the agent's private state and its round ledger; the node's secret seed, budget and consent stay in
        # its node config
        assert sorted(kept) == ["doadp", "doadp-client"], sorted(kept)
        assert kept["doadp-client"]["values"]["rounds"] == ROUNDS
    checkpoint = load_state(tmp_path / "run" / project_app.CHECKPOINT_FILE)
    assert "doadp" not in json.dumps(sorted(checkpoint["method"]))  # the agents' state is not the server's


def test_a_bad_client_state_key_is_refused(tmp_path):
    from flwr_strategies.clients.store import restore_client_state

    ctx = Context(run_id=1, node_id=1, node_config={"partition-id": 0, STATE_DIR_KEY: str(tmp_path)},
                  state=RecordDict(), run_config={})
    with pytest.raises(ValueError, match="client-state-key = '../../etc': expected 32 lowercase hex digits"):
        restore_client_state(ctx, {"client-state-key": "../../etc", "server-round": 2})
    assert not list(tmp_path.iterdir())


def test_a_checkpoint_carries_the_client_state_key_and_a_bad_one_is_refused(tmp_path, monkeypatch):
    _serve(FAMILIES["fedavg"], tmp_path / "run", None, monkeypatch=monkeypatch)
    state = load_state(tmp_path / "run" / project_app.CHECKPOINT_FILE)
    exp = get_experiment(FAMILIES["fedavg"])
    strategy = exp.spec.message_strategy(exp.server_setup(), dict(exp.params))
    strategy.load_state_dict(state)
    assert strategy.client_state_key == state["client_state_key"] and len(state["client_state_key"]) == 32
    assert state["client_state_partitions"] == list(range(NODES))  # every partition had trained
    assert strategy.client_state_config(0, ROUNDS + 1)["client-state-key"] == state["client_state_key"]
    with pytest.raises(ValueError, match="client_state_key' must be 32 lowercase hex digits"):
        exp.spec.message_strategy(exp.server_setup(), dict(exp.params)).load_state_dict(
            {**state, "client_state_key": "x"})


def test_resume_without_a_checkpoint_stops_before_any_round(tmp_path, monkeypatch):
    with pytest.raises(flwr_strategies.setup.SettingError, match="checkpoint.npz .*does not exist"):
        _serve(FAMILIES["fedavg"], tmp_path / "empty", None, resume=True, monkeypatch=monkeypatch)


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_a_switched_quickstart_app_resumes_scaffold_exactly_or_refuses(api, tmp_path, monkeypatch):
    # Flower's quickstart-pytorch with the docs' switch/scaffold.diff (its ClientApp carries
    # client_state_mod), on an in-process grid: a new grid is a new Flower run. Without a state folder
    # the resumed clients refuse instead of restarting c_i; with one (the environment variable, as in
    # Flower's simulation runtime) the resume ends bit-identical to the straight run.
    import flwr_strategies.serverapp
    from flwr_strategies.clients.store import STATE_DIR_ENV
    from quickstart_fixture import run_config, run_legacy_app, run_message_app, switched_app

    app = switched_app(api, "scaffold", tmp_path)
    module, run = ((flwr_strategies.serverapp, run_message_app) if api == "message" else (flwr_strategies, run_legacy_app))
    made, kept, scaffold = [], {}, module.Scaffold

    def serve(state_dir, rounds, checkpoint=None, keep_after=None):
        class Checkpointed(scaffold):  # the app's strategy, checkpointed after round keep_after
            def __init__(self, **kwargs):
                super().__init__(**kwargs, on_round_end=self.round_end)
                if checkpoint is not None:
                    self.load_state_dict(checkpoint)
                made.append(self)

            def round_end(self, record):
                if int(record["round"]) == keep_after:
                    kept["state"] = self.state_dict()
                elif keep_after is not None and int(record["round"]) == keep_after + 1:
                    raise Killed(f"ServerApp killed at the end of round {keep_after + 1}")

        monkeypatch.setattr(module, "Scaffold", Checkpointed)
        if state_dir is None:
            monkeypatch.delenv(STATE_DIR_ENV, raising=False)
        else:
            monkeypatch.setenv(STATE_DIR_ENV, str(state_dir))
        config = run_config(app, num_server_rounds=rounds, learning_rate=0.02, fraction_evaluate=0.0)
        errors = run(app, NODES, config)[-1]
        assert not errors, errors[:2]
        return [a.copy() for a in made[-1].core.global_arrays()]

    straight = serve(tmp_path / "nodes-a", ROUNDS)
    for nodes in (None, tmp_path / "nodes-b"):
        with pytest.raises(Killed):
            serve(nodes, KILLED_AFTER + 1, keep_after=KILLED_AFTER)
        assert kept["state"]["server_round"] == KILLED_AFTER
        if nodes is None:
            with pytest.raises(RuntimeError, match=r"resumes a checkpoint of round 2, in which partition [0-2] had "
                               r"trained, but the node kept no client state for it: its client keeps scaffold_c_i "
                               r".*client-state-dir") as refused:
                serve(None, ROUNDS - KILLED_AFTER, checkpoint=kept["state"])
            # the run stops (run_message_app reports the ServerApp's error by its name)
            assert "NoProgressError" in f"{type(refused.value).__name__}: {refused.value}"
    resumed = serve(tmp_path / "nodes-b", ROUNDS - KILLED_AFTER, checkpoint=kept["state"])
    assert len(straight) == len(resumed)
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(straight, resumed)), api
