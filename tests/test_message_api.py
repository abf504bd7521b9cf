"""The Message-API front end gives the same numbers as the legacy API on the same seed
(FedAvg and FedProx: same aggregation core, same reply order, same client code and seeds)."""

from __future__ import annotations

import numpy as np
import pytest

from flwr_strategies.message_api import InProcessGrid, make_client_app, run_message
from flwr_strategies.simulations.backends import run_inprocess
from flwr_strategies.simulations.experiment import ExperimentConfig


def _cfg(method: str = "fedavg") -> ExperimentConfig:
    params = {"proximal_mu": 0.1} if method == "fedprox" else {}
    return ExperimentConfig(method=method, params=params, dataset="digits", num_clients=3, rounds=3, seed=3,
                            partition="dirichlet", alpha=0.5, lr=0.05, batch_size=32, progress=False)


@pytest.mark.parametrize("method", ["fedavg", "fedprox"])
def test_message_api_equals_legacy(method):
    cfg = _cfg(method)
    legacy, _ = run_inprocess(cfg)
    legacy_acc = [r["accuracy"] for r in legacy.rounds]
    legacy_loss = [r["loss"] for r in legacy.rounds]

    result, history = run_message(cfg, InProcessGrid(make_client_app(cfg), cfg.num_clients))
    assert [h["round"] for h in history] == list(range(cfg.rounds + 1))
    assert [h["accuracy"] for h in history] == legacy_acc  # exact: same core, same order, same seeds
    assert [h["loss"] for h in history] == legacy_loss
    assert legacy_acc[-1] > legacy_acc[0] + 0.3  # and it learned (not two equal no-ops)


def test_message_fedavg_final_model_equals_legacy():
    from flwr_strategies.simulations.experiment import get_experiment

    cfg = _cfg()
    cfg.rounds = 2
    exp = get_experiment(cfg)
    original = exp.evaluate_fn
    captured: dict[int, list[np.ndarray]] = {}

    def spy(server_round, arrays, config):  # both paths evaluate through the experiment
        captured[server_round] = [a.copy() for a in arrays]
        return original(server_round, arrays, config)

    exp.evaluate_fn = spy
    try:
        run_inprocess(cfg)
        legacy_final = captured[cfg.rounds]
        result, _ = run_message(cfg, InProcessGrid(make_client_app(cfg), cfg.num_clients))
    finally:
        exp.evaluate_fn = original
    message_final = result.arrays.to_numpy_ndarrays()
    assert len(message_final) == len(legacy_final)
    for a, b in zip(message_final, legacy_final):
        np.testing.assert_array_equal(a, b)
