"""Faults in the runner (issues 13 and 18): method settings fail before training, a run in which
every client failed exits non-zero, ``compare`` goes on when one method fails, ``--fail`` reaches
the client of every registered method and must be able to fire; a degraded run (a round without
any update, a partition that failed every round, a diverged loss) exits 3 and says why in
results.json, which is written atomically; a hung client costs a bounded time by default."""

from __future__ import annotations

import dataclasses

import json

import pytest
from flwr.common import Context, RecordDict

from flwr_strategies import registry
from flwr_strategies.baselines.server import FedAvgServer
from flwr_strategies.baselines.strategy import FedAvg
from flwr_strategies.core.declare import setting
from flwr_strategies.registry import MethodSpec
from flwr_strategies.simulations import cli, experiment
from flwr_strategies.simulations.backends import run_backend
from flwr_strategies.simulations.experiment import Experiment, ExperimentConfig, InjectedFailure, MethodSettingsError
from flwr_strategies.simulations.runner import run_experiment


class _ExplodingServer(FedAvgServer):
    def aggregate_train(self, *args, **kwargs):
        raise RuntimeError("the aggregation exploded")


class _Exploding(FedAvg):
    core_cls = _ExplodingServer


def _rejecting_client(setup, params):
    raise ValueError(f"step_size must be > 0, got {params['step_size']!r}")


@dataclasses.dataclass(frozen=True)
class _StepSize:
    step_size: float = setting(-1.0, "> 0", "project: a default the fake method's client rejects", "Step size.")


@pytest.fixture
def faulty_methods():
    registry.list_methods()
    specs = [
        registry.register_method(MethodSpec(name="fake-exploding", summary="fails in round 1", paper="-",
                                            strategy=_Exploding, client="flwr_strategies.clients.base:TorchClient")),
        registry.register_method(MethodSpec(name="fake-rejecting", summary="its client rejects its settings", paper="-",
                                            settings=(_StepSize,), strategy=_Exploding, client=_rejecting_client)),
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
    # an isolated failure is not a degraded run: partition 0 fails in round 1 and contributes in round 2
    two_rounds = [a if a != "1" else "2" for a in SMALL]
    code = cli.main(["run", "--method", "fedavg", *two_rounds, "--fail", "1:0", "--out", str(tmp_path / "isolated")])
    saved = json.loads((tmp_path / "isolated" / "results.json").read_text())
    assert code == 0 and saved["status"] == "ok" and saved["summary"]["client_updates"] == 3


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


# -- issue 18: the run's status is the truth ------------------------------------------------------
def _run(args: list[str], tmp_path, capsys) -> tuple[int, str, dict]:
    code = cli.main(["run", *args, "--quiet", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    return code, err, json.loads((tmp_path / "results.json").read_text())


def test_a_round_in_which_every_client_failed_is_visible_in_the_exit_code(tmp_path, capsys):
    code, err, saved = _run(["--method", "fedavg", "--num-clients", "2", "--rounds", "3", "--local-steps", "2",
                             "--fail", "2:0", "--fail", "2:1"], tmp_path, capsys)
    assert code == cli.EXIT_DEGRADED == 3
    assert "no client update was aggregated in rounds 2" in err
    assert saved["status"].startswith("degraded") and saved["summary"]["rounds_without_updates"] == [2]
    assert saved["summary"]["client_updates"] == 4


def test_a_partition_that_failed_every_round_degrades_the_run(tmp_path, capsys):
    code, err, saved = _run(["--method", "dfedcata", "--num-clients", "3", "--rounds", "3", "--local-steps", "1",
                             "--fail", "*:1"], tmp_path, capsys)
    assert code == 3 and "partitions 1 (from round 1) failed in every round" in err
    assert saved["summary"]["lost_partitions"] == {"1": 1}
    assert [r["fit_failed_partitions"] for r in saved["rounds"][1:]] == [[1], [1], [1]]


def test_a_diverged_run_is_degraded(tmp_path, capsys):
    code, err, saved = _run(["--method", "doadp", "--num-clients", "4", "--rounds", "20", "--lr", "1e6"],
                            tmp_path, capsys)
    summary = saved["summary"]
    first_loss = next(r["loss"] for r in saved["rounds"] if r.get("loss") is not None)
    assert summary["final_loss"] > 100 * first_loss and summary["diverged"]
    assert code == 3 and "the loss diverged" in err


@pytest.mark.parametrize("fail,message", [
    ("2:1", "--fail 2:1: must be a failure that can happen: partition 1 is not sampled in round 2"),
    ("*:1", "--fail *:1: must be a failure that can happen: partition 1 is sampled in none of the 3 rounds"),
])
def test_an_injected_failure_that_cannot_fire_is_an_error(fail, message, capsys, monkeypatch):
    import flwr_strategies.simulations.runner as runner

    monkeypatch.setattr(runner, "run_backend", lambda *a, **k: pytest.fail("training started"))
    # with 10 clients and fraction 0.2 the seeded draw (seed 0) samples partitions [2, 3] in round 2
    # and never partition 1 in rounds 1-3
    code = cli.main(["run", "--method", "fedavg", "--num-clients", "10", "--fraction-fit", "0.2", "--rounds", "3",
                     "--fail", fail, "--quiet"])
    assert code == 2 and message in capsys.readouterr().err


def test_compare_with_no_method_names_is_an_error(tmp_path, capsys):
    code = cli.main(["compare", "--methods", ",", "--out", str(tmp_path)])
    assert code == 2 and "--methods ,: must be a comma-separated list of at least one method name" in capsys.readouterr().err
    assert not (tmp_path / "summary.md").exists()


def test_model_dir_error_names_the_setting_given(capsys):
    code = cli.main(["run", "--method", "fedmezo", "--set", "model_dir=missing", "--rounds", "1", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "--set model_dir=missing: must be a local transformers checkpoint folder" in err
    assert "--model-dir" not in err


def test_results_json_is_written_atomically(tmp_path, monkeypatch):
    import os

    from flwr_strategies.simulations.results import write_json

    path = write_json(tmp_path / "results.json", {"status": "ok", "rounds": [1, 2]})

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        write_json(path, {"status": "ok", "rounds": list(range(10_000))})
    assert json.loads(path.read_text()) == {"status": "ok", "rounds": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_default_client_timeout_is_tied_to_the_run_not_an_hour(monkeypatch):
    """``client_timeout="auto"`` (the default): a hung client is stopped after ten times the
    slowest call so far (scaled down here so the test is quick), and the run goes on."""
    import time

    import flwr_strategies.simulations.timeouts as timeouts
    from flwr_strategies.simulations.backends import run_inprocess

    cfg = ExperimentConfig(method="fedavg", num_clients=3, rounds=3, local_steps=2, progress=False).resolve()
    assert cfg.client_timeout == "auto"
    monkeypatch.setattr(timeouts, "AUTO_FLOOR_S", 0.5)
    monkeypatch.setattr(timeouts, "AUTO_FIRST_S", 30.0)
    exp = experiment.get_experiment(cfg)
    real_fit = exp.client_fit

    def client_fit(ctx, arrays, config):
        if config.get("partition-id") == 1 and config.get("server-round") == 2:
            time.sleep(3600)  # hung
        return real_fit(ctx, arrays, config)

    monkeypatch.setattr(exp, "client_fit", client_fit)
    t0 = time.perf_counter()
    outcome, _ = run_inprocess(cfg)
    assert time.perf_counter() - t0 < 60
    rounds = {r["round"]: r for r in outcome.rounds}
    assert rounds[2]["fit_failed_partitions"] == [1] and rounds[3]["failures"] == 0
    assert "did not return within the client timeout" in outcome.failure_log[0]["error"]
