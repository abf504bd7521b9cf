"""The in-process driver (core and clients called directly, no Flower messages) gives the Flower
paths' numbers bit for bit, and a hung client is a failed client, not a hung run."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from apiharness import assert_same_records, legacy_run, message_run

from flwr_strategies.baselines.server import FedAvgServer
from flwr_strategies.simulations.backends import run_driver, run_inprocess
from flwr_strategies.simulations.driver import CoreDriver, PartitionContexts
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
from flwr_strategies.simulations.timeouts import BoundedCaller

RECORD_KEYS = ("round", "loss", "accuracy", "bytes_up", "bytes_down", "clients", "failures", "rejected")


def _cfg(method: str, **kw) -> ExperimentConfig:
    base = dict(method=method, dataset="digits", num_clients=6, rounds=3, seed=4, fraction_fit=0.5,
                partition="dirichlet", alpha=0.5, lr=0.05, progress=False)
    base.update(kw)
    return ExperimentConfig(**base)


def _records(rounds):
    return [(r["round"], r["loss"], r.get("accuracy")) for r in rounds if r.get("loss") is not None]


@pytest.mark.parametrize("method", ["fedavg", "fedprox", "fedadam"])
def test_driver_equals_both_flower_apis(method):
    cfg = _cfg(method)
    outcome = run_driver(cfg)
    legacy, legacy_strategy, _ = legacy_run(cfg)
    message, message_strategy, _ = message_run(cfg)
    driver = _records(outcome.rounds)
    assert [r[0] for r in driver] == list(range(cfg.rounds + 1))
    assert_same_records(driver, legacy)
    assert_same_records(driver, message)
    assert driver[-1][2] > driver[0][2] + 0.2  # it learned: not three equal no-ops
    # the bookkeeping is the adapters' too (same sampled clients, same bytes each way)
    for mine, theirs in zip(outcome.rounds, legacy_strategy.history.rounds):
        assert {k: mine.get(k) for k in RECORD_KEYS} == {k: theirs.get(k) for k in RECORD_KEYS}
    for mine, theirs in zip(outcome.final_arrays, legacy_strategy.core.global_arrays()):
        np.testing.assert_array_equal(mine, theirs)
    assert outcome.state["server_round"] == cfg.rounds


# one of each kind of core: peer graph (and its official-code sequential mode), client state in
# context.state, a line-search client, factorised payloads
OTHER_CORES = {
    "dfedcata": dict(fraction_fit=1.0, params={"beta": 0.9, "neighbours": 3}),
    "dfedcata-sequential": dict(method="dfedcata", fraction_fit=1.0, rounds=8,  # one client's turn per round
                                params={"beta": 0.9, "neighbours": 3, "sequential_inplace": True,
                                        "extrapolation_anchor": "prev_local"}),
    "scaffold": {},
    "fedli-ls": {},
    "fedmud": dict(local_epochs=None, local_steps=2, batch_size=16, partition="iid"),
}


@pytest.mark.parametrize("case", sorted(OTHER_CORES))
def test_driver_equals_the_flower_adapters_for_other_cores(case):
    kw = dict(OTHER_CORES[case])
    cfg = _cfg(kw.pop("method", case), num_clients=4, **{"rounds": 2, **kw})
    outcome = run_driver(cfg)
    legacy, legacy_strategy, _ = legacy_run(cfg)
    evaluated = _records(outcome.rounds)
    assert len(evaluated) == 3 and evaluated[-1][0] == cfg.rounds  # initial model + two algorithm rounds
    assert_same_records(evaluated, legacy)
    assert outcome.rounds[-1]["bytes_up"] > 0 and sum(r["failures"] for r in outcome.rounds) == 0
    assert evaluated[-1][1] != evaluated[0][1]  # the model moved
    for mine, theirs in zip(outcome.rounds, legacy_strategy.history.rounds):
        assert {k: mine.get(k) for k in RECORD_KEYS} == {k: theirs.get(k) for k in RECORD_KEYS}
    for mine, theirs in zip(outcome.final_arrays, legacy_strategy.core.global_arrays()):
        np.testing.assert_array_equal(mine, theirs)


def test_driver_resumes_from_a_checkpoint():
    cfg = _cfg("fedadam", rounds=4)
    straight = run_driver(cfg)
    first = run_driver(ExperimentConfig(**{**cfg.to_dict(), "rounds": 2}))
    resumed = run_driver(cfg, state=first.state)
    assert _records(resumed.rounds)[-1] == _records(straight.rounds)[-1]
    for a, b in zip(resumed.final_arrays, straight.final_arrays):
        np.testing.assert_array_equal(a, b)


def test_inprocess_backend_uses_the_driver_and_keeps_the_results_keys():
    outcome, timing = run_inprocess(_cfg("fedavg", rounds=2, fail=["2:1", "2:3"], fraction_fit=1.0))
    assert outcome.path == "inprocess driver"
    rounds = outcome.rounds
    assert {"round", "accuracy", "loss", "bytes_up", "bytes_down", "clients", "failures", "nonfinite",
            "rejected", "wall_s", "elapsed_s", "fit_train_loss"} <= set(rounds[1])
    assert rounds[2]["failures"] == 2 and rounds[1]["failures"] == 0
    assert rounds[2]["bytes_up"] == rounds[1]["bytes_up"] * 4 // 6
    assert sum("injected failure" in f["error"] for f in outcome.failure_log) == 2


@pytest.mark.parametrize("use_signal", [True, False], ids=["main-thread-timer", "worker-thread"])
def test_hung_client_times_out_and_counts_as_a_failure(use_signal):
    cfg = _cfg("fedavg", fraction_fit=1.0, num_clients=4)
    exp = get_experiment(cfg)
    release = threading.Event()

    def client_fit(context, arrays, config):
        if context.node_config["partition-id"] == 2 and config["server-round"] == 2:
            release.wait()  # never returns on its own
        return exp.client_fit(context, arrays, config)

    core = exp.spec.build_core(exp.server_setup(), dict(exp.params))
    driver = CoreDriver(core, client_fit, PartitionContexts(4), evaluate_fn=exp.evaluate_fn, client_timeout=0.5)
    driver.call = BoundedCaller(0.5, use_signal=use_signal)
    try:
        rounds = driver.run(3)
    finally:
        release.set()  # let the abandoned worker thread finish
    per_round = {r["round"]: r for r in rounds}
    assert [per_round[r]["failures"] for r in (1, 2, 3)] == [0, 1, 0]
    assert per_round[3]["accuracy"] > per_round[0]["accuracy"]
    (entry,) = driver.failure_log
    assert entry["round"] == 2 and "partition 2" in entry["error"] and "ClientTimeout" in entry["error"]
    # the timer stops the hung call itself; without it the stuck worker thread is left behind
    assert (driver.call.interrupted, driver.call.abandoned) == ((1, 0) if use_signal else (0, 1))
    import signal

    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL  # given back after the run


def test_hung_client_on_flower_server_path_times_out():
    """Legacy strategies without a core run on Flower's Server with in-process proxies; their
    client calls are bounded the same way."""
    from flwr.common import FitIns, ndarrays_to_parameters

    from flwr_strategies.simulations.backends import InProcessClientProxy
    from flwr_strategies.simulations.timeouts import ClientTimeout

    release = threading.Event()

    class Hung:
        def fit(self, ins):
            release.wait()

    # Flower's Server calls proxies from its own thread pool: the worker-thread way
    proxy = InProcessClientProxy(0, 1, lambda ctx: Hung(), caller=BoundedCaller(0.2, use_signal=False))
    try:
        with pytest.raises(ClientTimeout, match="partition 0 fit"):
            proxy.fit(FitIns(ndarrays_to_parameters([np.zeros(2)]), {}), timeout=None, group_id=None)
    finally:
        release.set()


def test_client_timeout_is_validated():
    with pytest.raises(ValueError, match="client_timeout"):
        _cfg("fedavg", client_timeout=0).validate()
    with pytest.raises(ValueError, match="client_timeout"):
        _cfg("fedavg", client_timeout=float("nan")).validate()
    with pytest.raises(ValueError, match="client timeout"):
        CoreDriver(FedAvgServer([np.zeros(2)]), lambda *a: None, PartitionContexts(1), client_timeout=-1)
