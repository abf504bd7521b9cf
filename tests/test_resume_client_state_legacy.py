"""The legacy API resumes exactly, client state included: a method's legacy strategy
(``flwr.server.strategy.Strategy``, run by Flower's compatibility layer ``start_grid``) and the
project's ClientApp, whose legacy messages go to ``ClientApp(client_fn=..., mods=[client_state_mod])``
(the method's ready-made ``NumPyClient`` around a pooled model), on an in-process grid. A new grid is a
new Flower run: every node's ``context.state`` starts empty, and the nodes keep their clients' state
in their own folder (clients/store.py).

The first run trains round k + 1 and is then lost with the checkpoint of round k (the ServerApp died
before writing round k + 1's): the nodes have trained round k + 1 already, and the resume must restore
their state of round k. ``tests/test_resume_client_state.py`` does the same on the Message API.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from flwr.clientapp import ClientApp
from flwr.server import ServerConfig
from flwr.server.compat import start_grid

import flwr_strategies
from flwr_strategies.clients.store import MARKER, STATE_DIR_KEY
from flwr_strategies.sampling import PartitionClientManager
from flwr_strategies.simulations import app as project_app
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
from flwr_strategies.simulations.inprocess_grid import InProcessGrid
from test_resume_client_state import configure_nodes

ROUNDS, KILLED_AFTER, NODES = 4, 2, 3
SMALL = dict(dataset="digits", model="logreg", num_clients=NODES, rounds=ROUNDS, seed=0, local_steps=2, batch_size=8,
             progress=False)
# the methods whose ready-made clients keep state between rounds (docs/checkpoints.md), and two that keep none
FAMILIES = {
    "scaffold": ExperimentConfig(method="scaffold", **SMALL),
    "fedmud": ExperimentConfig(method="fedmud", fraction_fit=1.0, params={"target_ratio": 0.3},
                               **{**SMALL, "model": "mlp"}),
    "doadp": ExperimentConfig(method="doadp", **{**SMALL, "local_steps": 1}),
    "dfedcata": ExperimentConfig(method="dfedcata", **SMALL),
    "fedmezo": ExperimentConfig(method="fedmezo", num_clients=NODES, rounds=ROUNDS, lr=2e-4, local_epochs=None,
                                local_steps=2, batch_size=1, params={"n_examples": 30, "eval_every": 1},
                                progress=False),
}


class _Registering(PartitionClientManager):
    """``start_grid`` registers the grid's nodes when ``num_available`` is called (else every 5 s)."""

    def wait_for(self, num_clients: int, timeout: int = 86400) -> bool:
        self.num_available()
        return super().wait_for(num_clients, timeout)


def _run(cfg: ExperimentConfig, state_dir, *, rounds: int, checkpoint: dict | None = None,
         keep_after: int | None = None, client_app=project_app.client_app):
    """``rounds`` legacy rounds on a new grid (from ``checkpoint`` when given); returns the strategy,
    the grid and the checkpoint taken after round ``keep_after`` (None unless asked)."""
    resolved = cfg.resolve()
    exp = get_experiment(resolved)
    grid = InProcessGrid(client_app, NODES, run_config={"experiment": json.dumps(cfg.to_dict())})
    configure_nodes(grid, resolved, state_dir)
    strategy = exp.spec.legacy_strategy(exp.server_setup(), dict(exp.params))
    if checkpoint is not None:
        strategy.load_state_dict(checkpoint)
    kept: dict = {}
    if keep_after is not None:
        configure_fit = strategy.configure_fit

        def checkpointing(server_round, parameters, client_manager):
            if server_round == keep_after + 1:  # round keep_after is complete: its checkpoint
                kept["state"] = strategy.state_dict()
            return configure_fit(server_round, parameters, client_manager)

        strategy.configure_fit = checkpointing
    start_grid(grid=grid, strategy=strategy, config=ServerConfig(num_rounds=rounds),
               client_manager=_Registering(NODES, seed=resolved.seed))
    return strategy, grid, kept.get("state")


@pytest.mark.parametrize("method", list(FAMILIES))
def test_legacy_api_killed_and_resumed_in_a_new_run_equals_the_straight_run(method, tmp_path):
    cfg = FAMILIES[method]
    straight, _, _ = _run(cfg, tmp_path / "nodes-a", rounds=ROUNDS)
    _, _, checkpoint = _run(cfg, tmp_path / "nodes-b", rounds=KILLED_AFTER + 1, keep_after=KILLED_AFTER)
    assert checkpoint["server_round"] == KILLED_AFTER
    resumed, grid, _ = _run(cfg, tmp_path / "nodes-b", rounds=ROUNDS - KILLED_AFTER, checkpoint=checkpoint)
    a, b = straight.core.global_arrays(), resumed.core.global_arrays()
    assert len(a) == len(b) and resumed.core.server_round == ROUNDS
    assert all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b)), method
    restored = {int(ctx.state[MARKER]["round"]) for ctx in grid.contexts.values()}
    stateful = method not in ("dfedcata", "fedmezo")  # their clients keep no state (docs/checkpoints.md)
    assert restored == ({KILLED_AFTER} if stateful else {0}), (method, restored)
    assert any((tmp_path / "nodes-b").rglob("round-*.npz")) == stateful


def test_legacy_api_resume_with_state_not_restored_differs(tmp_path):
    # the oracle can fail: SCAFFOLD resumed with its control variates started over ends elsewhere
    cfg = FAMILIES["scaffold"]
    straight, _, _ = _run(cfg, None, rounds=ROUNDS)
    _, _, checkpoint = _run(cfg, None, rounds=KILLED_AFTER + 1, keep_after=KILLED_AFTER)
    checkpoint = {**checkpoint, "client_state_partitions": []}  # no partition has state to restore
    resumed, _, _ = _run(cfg, None, rounds=ROUNDS - KILLED_AFTER, checkpoint=checkpoint)
    assert not all(np.array_equal(x, y) for x, y in zip(straight.core.global_arrays(), resumed.core.global_arrays()))


# what each client keeps in context.state and loses in a new Flower run: SCAFFOLD's client trains on without its
# c_i and the node refuses its reply; FedMUD's and DO-ADP's clients fail without their state, and the node says why
LOST = {"scaffold": r": its client keeps scaffold_c_i in context.state between rounds",
        "fedmud": r" \(the node has no folder for it .*\), and its client failed without it: "
                  r"FedMUDStateError: this client holds no W_base",
        "doadp": r" \(the node has no folder for it .*\), and its client failed without it: "
                 r"ValueError: DO-ADP agent has no state"}


@pytest.mark.parametrize("method", list(LOST))
def test_legacy_api_resume_whose_nodes_kept_no_state_is_refused_naming_it(method, tmp_path):
    # without a folder on the nodes, the resumed clients refuse every round instead of silently starting over
    cfg = FAMILIES[method]
    _, _, checkpoint = _run(cfg, None, rounds=KILLED_AFTER + 1, keep_after=KILLED_AFTER)
    with pytest.raises(flwr_strategies.NoProgressError) as refused:
        _run(cfg, None, rounds=ROUNDS - KILLED_AFTER, checkpoint=checkpoint)
    text = str(refused.value)
    assert re.search(rf"resumes a checkpoint of round {KILLED_AFTER}, in which partition [0-{NODES - 1}] had trained, "
                     rf"but the node kept no client state for it{LOST[method]}", text), text
    assert f"--node-config \"{STATE_DIR_KEY}='...'\"" in text, text


def test_a_legacy_client_app_without_the_store_refuses_a_resume_that_would_start_its_state_over(tmp_path):
    # a user's own ClientApp(client_fn=...) without mods=[client_state_mod]: the straight run trains (the state
    # lives in context.state for the run), the resumed run's SCAFFOLD clients refuse instead of restarting c_i
    bare = ClientApp(client_fn=project_app._legacy_client_fn)
    cfg = FAMILIES["scaffold"]
    _, _, checkpoint = _run(cfg, tmp_path / "nodes", rounds=KILLED_AFTER + 1, keep_after=KILLED_AFTER, client_app=bare)
    assert not any((tmp_path / "nodes").rglob("round-*.npz"))  # nothing kept on the nodes
    with pytest.raises(flwr_strategies.NoProgressError,
                       match=rf"resumes a checkpoint of round {KILLED_AFTER}, in which partition [0-{NODES - 1}] "
                       r"had trained, but its client keeps scaffold_c_i in context.state .*runs no client-state "
                       r"store to restore them.*mods=\[client_state_mod\]"):
        _run(cfg, tmp_path / "nodes", rounds=ROUNDS - KILLED_AFTER, checkpoint=checkpoint, client_app=bare)
