"""A run that trains nothing stops; a run whose loss runs away is not "ok" (issue 26).

- Two consecutive rounds without an aggregated client update (every sampled client failed or was
  rejected, in any mix) raise :class:`~flwr_strategies.NoProgressError` naming the cause and the
  fix, on the in-process driver and through the Message-API strategy (``strategy.start``); its fix
  text is checked for every cause, by its wording.
- A round without a successful client never changes the global model, for each method family.
- A reply whose own train loss is non-finite or four orders above the others' is rejected as diverged.
- The divergence rule of a run's status: final loss above twice the initial one and above chance
  (ln(num_classes)), or a loss that rose in each of the last 5 evaluated rounds to above the
  initial one; a noisy but learning DP run trips neither. The ``flwr run`` path is
  ``tests/test_run_status_flwr.py``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

import flwr_strategies
import flwr_strategies.serverapp
from flwr_strategies.adapters.recorder import RoundRecorder, diagnose
from flwr_strategies.baselines.server import FedAvgServer
from flwr_strategies.core.messages import Reply
from flwr_strategies.core.validation import Rejection, ReplyError, screen
from flwr_strategies.simulations import cli
from flwr_strategies.simulations.driver import CoreDriver, PartitionContexts
from flwr_strategies.simulations.experiment import ExperimentConfig, get_experiment
from flwr_strategies.simulations.inprocess_grid import InProcessGrid
from flwr_strategies.simulations.results import chance_loss, divergence, run_status, summarize

REFUSAL = ("SCAFFOLD refuses SGD(lr=0.05, momentum=0.9): its control variates need an effective step lr / (1 - "
           "momentum) within its measured limit; use lr <= 0.02 with momentum 0.9")


def test_no_progress_error_is_exported_from_the_package():
    from flwr_strategies.adapters.recorder import NoProgressError

    assert flwr_strategies.NoProgressError is NoProgressError and "NoProgressError" in flwr_strategies.__all__
    assert issubclass(NoProgressError, RuntimeError)


# ------------------------------------------------------------------ the fix, for every cause
@pytest.mark.parametrize("rejections,failures,wording", [
    ([Rejection(0, "array 0 contains NaN or infinite values")], [],
     "The clients returned NaN or infinite values: local training diverged. Lower the learning rate (or clip "
     "gradients) in the clients' training."),
    ([Rejection(1, "diverged: its reported train_loss 5.9e+16 is more than 10000 times the median of the other "
                   "replies' (2.3)")], [],
     "The clients' own training loss ran away (partition 1: diverged: its reported train_loss 5.9e+16"),
    # the Message adapter's own text for a reply without num-examples (issue 26: no fix was given)
    ([Rejection(2, "metric 'num-examples' (weighted_by_key) is missing")], [],
     "The replies lack the metric 'num-examples' that weights the average: return it from the client, e.g. "
     "MetricRecord({'num-examples': len(trainloader.dataset), ...})"),
    ([Rejection(2, "metric 'step_size' is missing (is the client running the matching method?)")], [],
     "The replies lack the metric 'step_size'"),
    ([], [f"partition 0: ClientAppException: ValueError: {REFUSAL}"],
     f"The clients' training raised an error instead of replying; the first: partition 0: ClientAppException: "
     f"ValueError: {REFUSAL}. Change what it names (the clients' settings in the run config or the ClientApp's "
     "training code) and run again."),
    ([], ["partition 1: ClientAppException: FloatingPointError: FedMUD's local loss is not finite (nan)"],
     "The clients' local training diverged and raised; the first: partition 1: ClientAppException: "
     "FloatingPointError: FedMUD's local loss is not finite (nan). Lower the learning rate (or clip gradients) in the "
     "clients' training."),
    ([], ["partition 3: no reply (its node did not answer or was not connected)"],
     "The sampled clients did not reply (partition 3: no reply (its node did not answer or was not connected)): "
     "check that the SuperNodes are running and connected, and that the round's timeout leaves time for local "
     "training."),
    ([Rejection(0, "array 1 has shape (3,), expected (2,)")], [],
     "First rejection: partition 0: array 1 has shape (3,), expected (2,). The replies do not fit what the strategy "
     "sent: the ClientApp must return the arrays it received, trained (same count, shapes and dtypes)"),
])
def test_every_cause_has_its_fix(rejections, failures, wording):
    assert wording in diagnose(rejections, failures)


def _result(sampled, failed, rejections=()):
    out = type("R", (dict,), {})({"sampled_partitions": list(sampled), "failed_partitions": list(failed),
                                  "failures": len(failed)})
    out.rejections = list(rejections)
    return out


def test_failed_and_rejected_rounds_in_any_mix_stop_the_run():
    rec = RoundRecorder()
    rec.log_failure(1, "fit", f"partition 0: ValueError: {REFUSAL}")
    rec.training(1, _result([0, 1], [0, 1], [Rejection(1, "array 0 contains NaN or infinite values")]), [], 1,
                 logged=[0])
    rec.log_failure(2, "fit", f"partition 0: ValueError: {REFUSAL}")
    rec.log_failure(2, "fit", f"partition 1: ValueError: {REFUSAL}")
    with pytest.raises(flwr_strategies.NoProgressError) as err:
        rec.training(2, _result([0, 1], [0, 1]), [], 0, logged=[0, 1])
    text = str(err.value)
    assert text.startswith("rounds 1 to 2: every sampled client failed (2 failed, 0 rejected in round 2), so no client "
                           "update was aggregated and the model has not changed since round 0; stopping the run.")
    assert REFUSAL in text and "Change what it names" in text


def test_a_round_with_an_update_in_between_resets_the_count():
    rec = RoundRecorder()
    for rnd, failed in ((1, [0, 1]), (2, [1]), (3, [0, 1])):
        rec.training(rnd, _result([0, 1], failed), [], 2 - len(failed), logged=failed)
    with pytest.raises(flwr_strategies.NoProgressError, match="rounds 3 to 4"):
        rec.training(4, _result([0, 1], [0, 1]), [], 0, logged=[0, 1])


def test_the_driver_stops_when_every_client_refuses_its_setting():
    core = FedAvgServer([np.zeros(2, np.float32)], min_train=2)
    calls = []

    def refusing(ctx, arrays, config):
        calls.append(config["server-round"])
        raise ValueError(REFUSAL)

    driver = CoreDriver(core, refusing, PartitionContexts(2))
    with pytest.raises(flwr_strategies.NoProgressError, match=r"rounds 1 to 2: every sampled client failed") as err:
        driver.run(5)
    assert REFUSAL in str(err.value) and sorted(set(calls)) == [1, 2]
    assert all(np.array_equal(a, np.zeros(2)) for a in driver.global_arrays())


def _refusing_app(round_ok=lambda rnd: False):
    from flwr.clientapp import ClientApp

    from flwr_strategies.clients.app import partition_query

    app = ClientApp()

    @app.train()
    def train(msg, context):
        rnd = int(msg.content["config"]["server-round"])
        if not round_ok(rnd):
            raise ValueError(REFUSAL)
        arrays = [a + 1.0 for a in msg.content["arrays"].to_numpy_ndarrays()]
        return Message(RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 10})}),
                       reply_to=msg)

    app.query("partition")(partition_query)
    return app


def test_a_message_api_start_raises_when_every_client_refuses():
    s = flwr_strategies.serverapp.FedAvg(min_available_nodes=3, fraction_evaluate=0.0)
    with pytest.raises(flwr_strategies.NoProgressError, match="rounds 1 to 2: every sampled client failed") as err:
        s.start(grid=InProcessGrid(_refusing_app(), 3), initial_arrays=ArrayRecord([np.zeros(3, np.float32)]),
                num_rounds=5)
    assert REFUSAL in str(err.value)
    assert max(r["round"] for r in s.history.snapshot()) == 2


# ------------------------------------------------------------------ a round without a successful client
#: one method per family: FedAvg-like, SCAFFOLD, FedLi, FedMUD/FedLMT, decentralized, DO-ADP
FAMILIES = [("fedavg", {}), ("scaffold", {}), ("fedli-ls", {}), ("fedlmt", {}), ("fedmud", {"base_init": "given"}),
            ("dfedcata", {}), ("doadp", {})]


@pytest.mark.parametrize("method,params", FAMILIES, ids=[m for m, _ in FAMILIES])
def test_a_round_without_a_successful_client_keeps_the_global_model(method, params):
    cfg = ExperimentConfig(method=method, num_clients=3, rounds=3, local_steps=1, seed=0, progress=False,
                           params=dict(params)).resolve()
    exp = get_experiment(cfg)
    seen: dict[int, list[np.ndarray]] = {}

    def evaluate(server_round, arrays, config):
        seen[server_round] = [np.array(a, copy=True) for a in arrays]
        return 0.0, {}

    def client_fit(ctx, arrays, config):
        if config["server-round"] in (1, 3):
            raise ValueError(REFUSAL)
        return exp.client_fit(ctx, arrays, config)

    driver = CoreDriver(exp.build_core(), client_fit, PartitionContexts(3), evaluate_fn=evaluate)
    driver.run(3)
    same = lambda a, b: len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))  # noqa: E731
    assert same(seen[1], seen[0])  # round 1: every client failed, the model is the initial one
    assert not same(seen[2], seen[1])  # round 2 trained
    assert same(seen[3], seen[2]) and same(driver.global_arrays(), seen[2])  # round 3 failed again


@pytest.mark.parametrize("method,params", [("fedlmt", {}), ("fedmud", {"base_init": "given"})])
def test_flower_keeps_the_model_of_a_round_without_a_successful_client(method, params):
    """The issue's case in a user's app: FedLMT's factor initialisation (FedMUD's with
    ``base_init='given'``) replaced the model Flower held in a round in which every client failed."""
    from flwr_strategies.clients.app import numpy_client_app

    cfg = ExperimentConfig(method=method, num_clients=3, rounds=1, local_steps=1, seed=0, progress=False,
                           fraction_fit=1.0, params=dict(params)).resolve()
    exp = get_experiment(cfg)
    real = numpy_client_app(lambda context: exp.build_client(context, exp.model_fn()))

    def failing(msg, context):
        if msg.metadata.message_type == "train":
            raise ValueError(REFUSAL)
        return real(msg, context)

    strategy = exp.spec.message_strategy(exp.server_setup(), dict(exp.params))
    evaluated: dict[int, list[np.ndarray]] = {}

    def evaluate_fn(server_round, arrays):
        evaluated[server_round] = arrays.to_numpy_ndarrays()
        return MetricRecord({"loss": 0.0})

    initial = [a.copy() for a in exp.initial_parameters]
    result = strategy.start(grid=InProcessGrid(failing, 3), initial_arrays=ArrayRecord(initial), num_rounds=1,
                            evaluate_fn=evaluate_fn)
    assert strategy.history.rounds[-1]["failures"] == 3
    for arrays in (evaluated[1], result.arrays.to_numpy_ndarrays()):
        assert all(np.array_equal(a, b) for a, b in zip(arrays, initial))


# ------------------------------------------------------------------ a diverged reply
def _reply(pid, loss, value=1.0):
    return Reply(pid, [np.full(2, value, np.float32)], 10, {"train_loss": loss})


@pytest.mark.parametrize("loss,reason", [
    (5.9e16, "diverged: its reported train_loss 5.9e+16 is more than 10000 times the median of the other replies' (2.3)"),
    (float("nan"), "diverged: its reported train_loss is nan (non-finite)"),
    (float("inf"), "diverged: its reported train_loss is inf (non-finite)"),
])
def test_a_reply_whose_own_train_loss_ran_away_is_rejected_and_named(loss, reason):
    core = FedAvgServer([np.zeros(2, np.float32)], num_partitions=4, min_train=4)
    replies = [_reply(0, 2.3), _reply(1, loss, 1e6), _reply(2, 2.2), _reply(3, 2.4)]
    result = core.train_round(1, replies, sampled=[0, 1, 2, 3])
    assert [str(r) for r in result.rejections] == [f"partition 1: {reason}"]
    assert np.allclose(core.global_arrays()[0], 1.0)  # the three others, averaged
    with pytest.raises(ReplyError, match="round 1: partition 1: diverged"):
        FedAvgServer([np.zeros(2, np.float32)], num_partitions=4, min_train=4).train_round(
            1, replies, sampled=[0, 1, 2, 3], on_bad_reply="raise")


def test_ordinary_spread_of_train_losses_is_not_divergence():
    replies = [_reply(0, 0.01), _reply(1, 30.0), _reply(2, 2.0), _reply(3, 0.5)]  # 3,000x apart: non-IID, not diverged
    valid, rejected = screen(FedAvgServer([np.zeros(2, np.float32)], num_partitions=4), 1, replies, sampled=range(4))
    assert len(valid) == 4 and not rejected


# ------------------------------------------------------------------ the divergence rule
LN10 = math.log(10)


def _rounds(losses):
    return [{"round": r, "loss": v, "accuracy": None, "bytes_up": 0, "bytes_down": 0, "clients": 2, "failures": 0}
            for r, v in enumerate(losses)]


def test_six_times_the_initial_loss_is_divergence():
    s = summarize(_rounds([2.42, 3.6, 5.7, 9.0, 14.52]), chance=LN10)
    assert s["diverged"] and s["divergence"].startswith("the final loss 14.52 (round 4) is 6 times the initial loss 2.42")
    assert run_status(s).startswith("degraded: the loss diverged: the final loss 14.52")


def test_twice_the_initial_loss_but_below_chance_is_not_divergence():
    # a fine-tuned classifier starting at 0.3: 0.7 is worse, but far better than guessing
    assert divergence([(0, 0.3), (1, 0.5), (2, 0.7)], chance=LN10) is None
    assert divergence([(0, 0.3), (1, 0.5), (2, 0.7)]) is not None  # no chance level (not a classifier): 2x rules


def test_a_loss_that_rises_round_after_round_is_divergence():
    losses = [(0, 2.42), (1, 1.2), (2, 1.6), (3, 1.9), (4, 2.1), (5, 2.3), (6, 2.5)]
    assert "rose in each of the last 5 evaluated rounds (rounds 1 to 6" in divergence(losses, chance=LN10)
    assert divergence(losses[:-1], chance=LN10) is None  # still below the initial loss


def test_a_nonfinite_final_loss_is_divergence():
    assert divergence([(0, 2.3), (1, float("nan"))]) == "the final loss is nan (round 1)"


def test_a_noisy_learning_dp_loss_curve_is_not_divergence():
    # DO-ADP at epsilon 8 on digits (measured, below): up for three rounds, then down, below the start
    curve = [2.423, 2.313, 2.326, 2.343, 2.376, 2.36, 2.324, 2.3, 2.264, 2.236, 2.22]
    assert divergence(list(enumerate(curve)), chance=LN10) is None


def test_chance_loss_is_the_log_of_the_classes():
    assert chance_loss(10) == pytest.approx(2.302585) and chance_loss(None) is None


def _cli(args, tmp_path, capsys):
    code = cli.main(["run", *args, "--quiet", "--out", str(tmp_path)])
    return code, capsys.readouterr().err, json.loads((tmp_path / "results.json").read_text())


def test_a_run_that_ends_at_six_times_its_initial_loss_exits_3_naming_divergence(tmp_path, capsys, monkeypatch):
    """The run's own evaluation, scaled so that the final loss is exactly 6x the initial one."""
    from flwr_strategies.simulations import experiment

    real = experiment.Experiment.evaluate_fn

    def first(self, server_round, arrays, config):
        loss, metrics = real(self, server_round, arrays, config)
        if server_round == 0:
            self._first_loss = loss
            return loss, metrics
        return 6.0 * self._first_loss, metrics

    monkeypatch.setattr(experiment.Experiment, "evaluate_fn", first)
    code, err, saved = _cli(["--method", "fedavg", "--num-clients", "2", "--rounds", "2", "--local-steps", "1"],
                            tmp_path, capsys)
    losses = [r["loss"] for r in saved["rounds"]]
    assert losses[-1] == pytest.approx(6 * losses[0])
    assert code == cli.EXIT_DEGRADED == 3 and "diverged" in err and "is 6 times the initial loss" in err
    assert saved["status"].startswith("degraded: the loss diverged") and saved["summary"]["diverged"]


def test_a_real_run_whose_loss_runs_away_exits_3(tmp_path, capsys):
    # DPDO at step 1 and epsilon 4 on digits: the loss grows every round (measured 2.42 -> 26.3 in 5 rounds, 4 agents)
    code, err, saved = _cli(["--method", "dpdo", "--lr", "1", "--set", "epsilon=4", "--num-clients", "4", "--rounds",
                             "5", "--client-seed", "1"], tmp_path, capsys)
    assert code == 3 and "the loss diverged" in err, err
    assert saved["summary"]["final_loss"] > 2 * saved["rounds"][0]["loss"]


def test_a_noisy_but_learning_dp_run_is_ok(tmp_path, capsys):
    # DO-ADP at epsilon 8 (accountant calibration), step 0.3: noisy, and it learns
    code, err, saved = _cli(["--method", "doadp", "--lr", "0.3", "--set", "epsilon=8", "--set", "calibration=accountant",
                             "--num-clients", "4", "--rounds", "10", "--client-seed", "1"], tmp_path, capsys)
    losses = [r["loss"] for r in saved["rounds"] if r.get("loss") is not None]
    assert losses[-1] < losses[0] and saved["rounds"][-1]["fit_step_noise_norm"] > 0, losses
    assert code == 0 and saved["status"] == "ok" and not saved["summary"]["diverged"], (err, losses)


# ------------------------------------------------------------------ the project's ServerApp (Message API)
def _serve(cfg: ExperimentConfig, out, num_nodes: int):
    from flwr.app import Context

    from flwr_strategies.simulations import app as project_app

    rc = {"experiment": json.dumps(cfg.to_dict()), "out-dir": str(out)}
    grid = InProcessGrid(project_app.client_app, num_nodes, run_config=rc)
    resolved = cfg.resolve()
    if "epsilon" in resolved.params:  # a private method's nodes hold their own budget (the run's target)
        for ctx in grid.contexts.values():
            ctx.node_config.update({"doadp-epsilon": float(resolved.params["epsilon"]), "doadp-rounds": resolved.rounds})
    return project_app.serve(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))


def test_the_serverapp_stops_a_run_that_trains_nothing_and_says_why(tmp_path):
    cfg = ExperimentConfig(method="fedavg", num_clients=2, rounds=4, local_steps=1, fail=["*:0", "*:1"], progress=False)
    with pytest.raises(flwr_strategies.NoProgressError, match="rounds 1 to 2: every sampled client failed"):
        _serve(cfg, tmp_path, 2)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["status"] == "failed" and saved["error"].startswith("NoProgressError: rounds 1 to 2")
    assert "injected failure of partition" in saved["error"] and "Change what it names" in saved["error"]
    assert max(r["round"] for r in saved["rounds"]) == 2


def test_the_serverapp_names_a_diverged_run(tmp_path, caplog):
    # DPDO at step 1 and epsilon 1 on digits: 2.42 -> 8.8 after one round, 22.8 after five (measured in process)
    cfg = ExperimentConfig(method="dpdo", lr=1.0, num_clients=4, rounds=3, progress=False, params={"epsilon": 1.0})
    _serve(cfg, tmp_path, 4)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["status"].startswith("degraded: the loss diverged: the final loss"), saved["status"]
    assert "chance-level loss 2.303" in saved["status"] and saved["summary"]["diverged"]
    assert any("the loss diverged" in r.getMessage() for r in caplog.records)


def test_the_command_line_stops_a_run_that_trains_nothing_and_keeps_its_records(tmp_path, capsys):
    code = cli.main(["run", "--method", "fedavg", "--num-clients", "2", "--rounds", "4", "--local-steps", "1",
                     "--fail", "*:0", "--fail", "*:1", "--quiet", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == cli.EXIT_FAILED == 1
    assert "error: fedavg failed: rounds 1 to 2: every sampled client failed" in err and "Change what it names" in err
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["status"].startswith("failed: NoProgressError: rounds 1 to 2")
    assert [r["round"] for r in saved["rounds"]] == [0, 1, 2] and saved["summary"]["client_updates"] == 0
