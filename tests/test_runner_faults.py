"""Faults in the runner (issue 13): method settings fail before training, a run in which every
client failed exits non-zero, ``compare`` goes on when one method fails, and ``--fail`` reaches the
client of every registered method."""

from __future__ import annotations

import json

import pytest
from flwr.common import Context, RecordDict

from flwr_strategies import registry
from flwr_strategies.registry import MethodSpec
from flwr_strategies.simulations import cli, experiment
from flwr_strategies.simulations.backends import run_backend
from flwr_strategies.simulations.experiment import Experiment, ExperimentConfig, InjectedFailure, MethodSettingsError
from flwr_strategies.simulations.runner import run_experiment


def _exploding_core(setup, params):
    from flwr_strategies.baselines.registration import _fedavg

    core = _fedavg(setup, params)

    def aggregate_train(*args, **kwargs):
        raise RuntimeError("the aggregation exploded")

    core.aggregate_train = aggregate_train
    return core


def _rejecting_client(setup, params):
    raise ValueError(f"step_size must be > 0, got {params['step_size']!r}")


@pytest.fixture
def faulty_methods():
    registry.list_methods()
    specs = [
        registry.register_method(MethodSpec(name="fake-exploding", summary="fails in round 1", paper="-",
                                            build_core=_exploding_core, client="flwr_strategies.clients.base:build_torch_client")),
        registry.register_method(MethodSpec(name="fake-rejecting", summary="its client rejects its settings", paper="-",
                                            defaults={"step_size": -1.0}, build_core=_exploding_core, client=_rejecting_client)),
    ]
    yield
    for spec in specs:
        registry._REGISTRY.pop(spec.name, None)


SMALL = ["--num-clients", "2", "--rounds", "1", "--quiet", "--local-steps", "2"]


def test_method_settings_fail_before_the_first_round(faulty_methods, monkeypatch):
    import flwr_strategies.simulations.runner as runner

    monkeypatch.setattr(runner, "run_backend", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(MethodSettingsError, match="fake-rejecting.*step_size must be > 0, got -1.0"):
        run_experiment(ExperimentConfig(method="fake-rejecting", progress=False))
    with pytest.raises(MethodSettingsError, match=r"proximal_mu=-1.0.*proximal_mu must be >= 0"):
        run_experiment(ExperimentConfig(method="fedprox", params={"proximal_mu": "-1"}, progress=False))


def test_preflight_leaves_the_numbers_unchanged():
    cfg = ExperimentConfig(method="fedavg", num_clients=3, rounds=2, fraction_fit=0.67, local_steps=3, progress=False).resolve()
    experiment._EXPERIMENTS.clear()
    without, _ = run_backend(cfg)
    experiment._EXPERIMENTS.clear()
    with_check = run_experiment(cfg)
    assert [(r["loss"], r["accuracy"], r["clients"]) for r in without.rounds] == [
        (r["loss"], r["accuracy"], r["clients"]) for r in with_check["rounds"]]


def test_every_client_failing_exits_nonzero_and_keeps_results(tmp_path, capsys):
    code = cli.main(["run", "--method", "fedavg", *SMALL, "--fail", "*:0", "--fail", "*:1", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and "every client failed" in err
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["status"].startswith("failed") and saved["summary"]["client_updates"] == 0
    code = cli.main(["run", "--method", "fedavg", *SMALL, "--fail", "1:0", "--out", str(tmp_path)])
    assert code == 0 and json.loads((tmp_path / "results.json").read_text())["summary"]["client_updates"] == 1


def test_compare_goes_on_when_a_method_fails(faulty_methods, tmp_path, capsys):
    code = cli.main(["compare", "--methods", "fedavg,fake-exploding,fake-rejecting,fedprox", *SMALL, "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 1
    assert "fake-exploding" in captured.err and "the aggregation exploded" in captured.err
    assert "fake-rejecting" in captured.err and "step_size must be > 0" in captured.err
    table = (tmp_path / "summary.md").read_text()
    assert "| fedavg | 0." in table and "| fedprox | 0." in table
    assert "| fake-exploding | **failed**" in table and "| fake-rejecting | **failed**" in table
    assert (tmp_path / "fedprox" / "results.json").exists()
    runs = {r["label"]: r["status"] for r in json.loads((tmp_path / "summary.json").read_text())["runs"]}
    assert runs["fedavg"] == runs["fedprox"] == "ok" and runs["fake-exploding"].startswith("failed")


def test_compare_checks_every_entry_before_the_first_trains(tmp_path, monkeypatch, capsys):
    import flwr_strategies.simulations.compare as compare

    monkeypatch.setattr(compare, "run_experiment", lambda *a, **k: pytest.fail("training started"))
    code = cli.main(["compare", "--methods", "fedavg,fedprox", *SMALL, "--fail", "1:7", "--out", str(tmp_path)])
    assert code == 2 and "--fail 1:7" in capsys.readouterr().err


def _small_params(spec: MethodSpec) -> dict:
    # a ratio every compression method reaches on the digits MLP (this test is about --fail, not defaults)
    return {"target_ratio": "0.5"} if "target_ratio" in spec.defaults else {}


@pytest.mark.parametrize("method", sorted(registry.list_methods()))
def test_fail_flag_reaches_every_methods_client(method):
    spec = registry.get_method(method)
    exp = Experiment(ExperimentConfig(method=method, rounds=2, fail=["2:1"], params=_small_params(spec), progress=False))
    ctx = Context(run_id=0, node_id=1, node_config={"partition-id": 1, "num-partitions": exp.cfg.num_clients},
                  state=RecordDict(), run_config={})
    client = exp.build_client(ctx, exp.model_fn())
    with pytest.raises(InjectedFailure, match="partition 1 in round 2"):
        client.fit([a.copy() for a in exp.initial_parameters], {**exp.fit_config(2), "server-round": 2})
