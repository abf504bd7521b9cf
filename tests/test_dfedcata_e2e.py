"""End-to-end runs through the foundation runner: learning, failures, inprocess == ray."""

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import math

import pytest

from flwr_strategies.simulations.experiment import ExperimentConfig
from flwr_strategies.simulations.runner import run_experiment

BASE = dict(dataset="digits", num_clients=6, rounds=3, partition="dirichlet", alpha=0.3, model="logreg",
            lr=0.1, lr_decay=0.998, local_epochs=1, batch_size=32, seed=3, progress=False)


def _run(method, **kw):
    cfg = ExperimentConfig(**{**BASE, "method": method, **kw})
    return run_experiment(cfg)


KEYS = ("accuracy", "fit_consensus_distance", "client_accuracy_mean", "fit_spectral_gap", "fit_train_loss")


def test_dfedcata_learns_and_reports_decentralized_metrics():
    res = _run("dfedcata", params={"beta": 0.9, "neighbours": 4}, rounds=4)
    rounds = res["rounds"]
    assert [r["round"] for r in rounds if r["round"] > 0] == [1, 2, 3, 4]
    last = rounds[-1]
    for k in KEYS:
        assert k in last and math.isfinite(last[k])
    # 10 classes: chance is 0.1; a few rounds of logistic regression on digits must learn
    assert last["accuracy"] > 0.6
    assert 0 <= last["client_accuracy_min"] <= last["client_accuracy_mean"] <= 1


def test_injected_failure_is_reported_and_run_continues():
    res = _run("dfedcata", params={"beta": 0.9, "neighbours": 4}, fail=["2:1"])
    r2 = next(r for r in res["rounds"] if r["round"] == 2)
    assert r2["fit_failures"] == 1 and r2["failures"] == 1
    assert all(math.isfinite(r["accuracy"]) for r in res["rounds"])


@pytest.mark.parametrize("method", ["dfedavg", "dfedavgm", "dfedsam", "dpsgd", "fedsam"])
def test_baselines_run(method):
    res = _run(method, rounds=2, params={} if method == "fedsam" else {"neighbours": 4})
    assert res["rounds"][-1]["accuracy"] > 0.2


def test_fraction_fit_below_one_is_rejected_for_decentralized():
    with pytest.raises(ValueError, match="fraction_fit"):
        _run("dfedavg", fraction_fit=0.5)


@pytest.mark.ray
def test_same_numbers_on_inprocess_and_ray():
    kw = dict(params={"beta": 0.9, "neighbours": 4}, rounds=2, num_clients=4)
    a = _run("dfedcata", backend="inprocess", **kw)
    b = _run("dfedcata", backend="ray", client_cpus=2, **kw)
    assert len(a["rounds"]) == len(b["rounds"]) == 3
    for ra, rb in zip(a["rounds"], b["rounds"]):
        for k in KEYS + ("loss", "bytes_up", "bytes_down"):
            if k in ra:
                assert ra[k] == rb[k], (k, ra["round"], ra[k], rb[k])


def test_sequential_inplace_runs_through_the_runner():
    # 4 clients x 2 algorithm rounds = 8 Flower rounds
    res = _run("dfedcata", num_clients=4, rounds=8, params={"beta": 0.9, "neighbours": 3, "sequential_inplace": True,
                                                              "extrapolation_anchor": "prev_local", "client_eval_every": 4})
    assert [r.get("fit_client") for r in res["rounds"] if r["round"] > 0] == [0, 1, 2, 3] * 2
    assert res["rounds"][-1]["accuracy"] > 0.3
