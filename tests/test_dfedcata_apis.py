"""DFedCata and its baselines through both Flower APIs: same per-round numbers, checkpoint/resume,
and the user-facing classes (legacy ``DFedCata(...)`` and Message-API ``DFedCata(...).start()``)."""

from __future__ import annotations

import numpy as np
import pytest
from apiharness import assert_same_records, legacy_run, message_run
from flwr.app import ArrayRecord, MetricRecord
from flwr.server import Server

from flwr_strategies.clients.app import numpy_client_app
from flwr_strategies.core.state import load_state, save_state
from flwr_strategies.sampling import PartitionClientManager
from flwr_strategies.simulations.backends import InProcessClientProxy
from flwr_strategies.simulations.experiment import ClientFactory, ExperimentConfig, get_experiment
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

BASE = dict(dataset="digits", num_clients=5, rounds=3, partition="dirichlet", alpha=0.3, model="logreg", lr=0.1,
            lr_decay=0.998, local_epochs=1, batch_size=32, weight_decay=5e-4, grad_clip=5.0, seed=2, progress=False)

METHODS = {
    "dfedcata": {"beta": 0.9, "neighbours": 3},
    "dfedavg": {"neighbours": 3},
    "dfedavgm": {"neighbours": 3},
    "dfedsam": {"neighbours": 3},
    "dpsgd": {"neighbours": 3},
    "fedsam": {},
}


def _cfg(method: str, **kw) -> ExperimentConfig:
    over = {"fraction_fit": 0.6} if method == "fedsam" else {}
    return ExperimentConfig(**{**BASE, **over, "method": method, "params": dict(METHODS[method]), **kw})


@pytest.mark.parametrize("method", sorted(METHODS))
def test_both_apis_give_the_same_numbers(method):
    a, _, _ = legacy_run(_cfg(method))
    b, _, _ = message_run(_cfg(method))
    assert_same_records(a, b)
    assert len(a) == 4 and a[-1][2] > a[0][2] + 0.1  # it learned: not two equal no-ops


def test_sequential_mode_same_numbers_in_both_apis():
    cfg = _cfg("dfedcata", num_clients=4, rounds=8,
               params={"beta": 0.9, "neighbours": 3, "sequential_inplace": True, "extrapolation_anchor": "prev_local"})
    a, _, _ = legacy_run(cfg)
    b, _, _ = message_run(cfg)
    assert_same_records(a, b)
    assert [r[0] for r in a] == [0, 4, 8]  # evaluated once per algorithm round (4 turns)


@pytest.mark.parametrize("api", ["legacy", "message"])
@pytest.mark.parametrize("params", [
    {"beta": 0.9, "neighbours": 3},
    {"beta": 0.9, "neighbours": 3, "extrapolation_anchor": "prev_local"},
])
def test_dfedcata_checkpoint_resume_equals_straight_run(tmp_path, api, params):
    run = legacy_run if api == "legacy" else message_run
    cfg = _cfg("dfedcata", rounds=4, params=params)
    straight, _, _ = run(cfg)
    first, strategy, clients = run(cfg, rounds=2)
    state = load_state(save_state(tmp_path / "ck.npz", strategy.state_dict()))
    assert state["server_round"] == 2 and set(state["method"]) >= {"models", "anchors"}
    resumed, _, _ = run(cfg, state=state, clients=clients)
    assert resumed[-1] == straight[-1]
    assert first == straight[:3]


def test_sequential_checkpoint_mid_algorithm_round(tmp_path):
    cfg = _cfg("dfedcata", num_clients=4, rounds=8, params={"beta": 0.9, "neighbours": 3, "sequential_inplace": True})
    straight, _, _ = message_run(cfg)
    _, strategy, grid = message_run(cfg, rounds=6)  # stops after peer 1 of algorithm round 2
    state = load_state(save_state(tmp_path / "ck.npz", strategy.state_dict()))
    resumed, _, _ = message_run(cfg, state=state, clients=grid)
    assert resumed[-1] == straight[-1]


# ------------------------------------------------------------------ the classes a user builds directly
def _user_cfg() -> ExperimentConfig:
    return _cfg("dfedcata", rounds=2, weight_decay=0.0, grad_clip=None)


def _legacy_direct(cfg: ExperimentConfig, strategy_cls, **kw):
    exp = get_experiment(cfg)
    strategy = strategy_cls(min_available_clients=cfg.num_clients, fraction_evaluate=0.0,
                            initial_parameters=[a.copy() for a in exp.initial_parameters],
                            evaluate_fn=exp.evaluate_fn, on_fit_config_fn=exp.fit_config, seed=cfg.seed, **kw)
    manager = PartitionClientManager(cfg.num_clients, seed=cfg.seed)
    for pid in range(cfg.num_clients):
        manager.register(InProcessClientProxy(pid, cfg.num_clients, ClientFactory(cfg)))
    server = Server(client_manager=manager, strategy=strategy)
    server.set_max_workers(1)
    server.fit(num_rounds=cfg.rounds, timeout=None)
    strategy.history.finalize()
    return [(r["round"], r["loss"], r["accuracy"]) for r in strategy.history.rounds if r.get("loss") is not None]


def _message_direct(cfg: ExperimentConfig, strategy):
    exp = get_experiment(cfg)
    models: list = []

    def client_fn(context):
        if not models:
            models.append(exp.model_fn())
        return exp.build_client(context, models[0])

    def evaluate_fn(server_round, arrays: ArrayRecord) -> MetricRecord:
        loss, metrics = exp.evaluate_fn(server_round, arrays.to_numpy_ndarrays(), {})
        return MetricRecord({"loss": float(loss), **{k: float(v) for k, v in metrics.items()}})

    grid = InProcessGrid(numpy_client_app(client_fn), cfg.num_clients)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord([a.copy() for a in exp.initial_parameters]),
                            num_rounds=cfg.rounds, evaluate_fn=evaluate_fn)  # Flower's own run loop
    recs = [(r, m["loss"], m["accuracy"]) for r, m in sorted(result.evaluate_metrics_serverapp.items())]
    return recs, result


def test_user_facing_classes_match_the_registry_in_both_apis():
    from flwr_strategies.dfedcata import serverapp, strategy

    cfg = _user_cfg()
    reference, _, _ = legacy_run(cfg)
    legacy = _legacy_direct(cfg, strategy.DFedCata, beta=0.9, lam=0.05, neighbours=3)
    assert_same_records(reference, legacy)
    message, result = _message_direct(cfg, serverapp.DFedCata(beta=0.9, lam=0.05, topology="random", neighbours=3,
                                                              seed=cfg.seed, fraction_evaluate=0.0,
                                                              on_train_config_fn=get_experiment(cfg).fit_config))
    assert_same_records(reference, message)
    assert result.arrays is not None and len(result.arrays) == len(get_experiment(cfg).initial_parameters)


def test_message_strategy_learns_the_number_of_peers_at_start():
    from flwr_strategies.dfedcata.serverapp import DFedCata

    strategy = DFedCata()  # nothing about the federation yet
    assert strategy.core is None
    cfg = _user_cfg()
    _message_direct(cfg, DFedCata(neighbours=3, fraction_evaluate=0.0,
                                  on_train_config_fn=get_experiment(cfg).fit_config))
    s = DFedCata(neighbours=3, fraction_evaluate=0.0, on_train_config_fn=get_experiment(cfg).fit_config)
    _message_direct(cfg, s)
    assert s.core.num_partitions == cfg.num_clients and s.core.models.data.shape[0] == cfg.num_clients


def test_dfedavg_and_dpsgd_classes_build_their_cores():
    from flwr_strategies.dfedcata import serverapp, strategy
    from flwr_strategies.dfedcata.server import DFedAvgServer, DPSGDServer

    init = [np.zeros((3, 2), np.float32)]
    assert isinstance(strategy.DFedAvg(initial_parameters=init).build_core(init, 4), DFedAvgServer)
    assert isinstance(strategy.DPSGD(initial_parameters=init, topology="ring").build_core(init, 4), DPSGDServer)
    assert isinstance(serverapp.DPSGD(topology="ring").build_core(init, 4), DPSGDServer)
    assert isinstance(serverapp.DFedAvg().build_core(init, 4), DFedAvgServer)
