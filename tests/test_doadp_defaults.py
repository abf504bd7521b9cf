"""DO-ADP, D-mSGD and the baselines run with nothing but their name (issue 26): the step size comes from
the noise rule once sigma is calibrated, and the default runs learn where the README says they do.

Exactly what ``python -m simulations run --method M --client-seed 0`` runs (digits, 20 agents, 20
rounds; the client seed only makes the noise repeatable). "Learned" is the README's rule
(:func:`simulations.regen.learned`): accuracy up at least 0.05 over round 0 and the final loss below
the initial loss. Every default run learns; DPDO and CPGT at their own default epsilon (512 on digits).
At DO-ADP's epsilon 4 (the paper's equal-epsilon comparison) they do not (their Laplace noise is on the
model, so the rule leaves them a step 18-37 times smaller than DO-ADP's); the docs' table says so, and
the test pins it so that a change is seen.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
import pytest

from flwr_strategies.doadp.config import STEP_NOISE_BOUND, DOADPConfig
from flwr_strategies.doadp.server import DMSGDServer
from flwr_strategies.registry import get_method
from flwr_strategies.setup import SettingError
from flwr_strategies.simulations.experiment import Experiment
from flwr_strategies.simulations.runner import run_experiment
from flwr_strategies.simulations.settings import ExperimentConfig
from flwr_strategies.simulations.regen import DOADP_CLIENT_SEEDS, DOADP_METHODS, learned

PRIVATE = ("doadp", "dpdo", "dp-dda", "cpgt")
LAPLACE = ("dpdo", "cpgt")
STEP_NOISE_DEFAULT = DOADPConfig().step_noise_norm


@pytest.fixture(scope="module")
def runs():
    return {m: run_experiment(ExperimentConfig(method=m, client_seed=0, progress=False)) for m in DOADP_METHODS}


@pytest.fixture(scope="module")
def equal_epsilon_runs(runs):
    """DPDO and CPGT at DO-ADP's default epsilon (the paper compares at equal epsilon, Fig. 3)."""
    eps = runs["doadp"]["params"]["epsilon"]
    return {m: run_experiment(ExperimentConfig(method=m, client_seed=0, progress=False, params={"epsilon": eps}))
            for m in LAPLACE}


def test_the_defaults_are_the_plain_command(runs):
    for method, res in runs.items():
        assert res["status"] == "ok", (method, res["status"])
        assert res["config"]["rounds"] == 20 and res["config"]["num_clients"] == 20, method
        assert res["config"]["dataset"] == "digits", method
        lr, source = res["config"]["lr"], res["provenance"]["lr"]
        if method in PRIVATE:  # the value that ran is in every round's metrics (fit_alpha / fit_beta0)
            assert lr == "auto" and source.startswith("project: auto"), (method, lr, source)
        else:
            assert isinstance(lr, float), (method, lr)


@pytest.mark.parametrize("method", PRIVATE)
def test_each_private_step_meets_the_noise_rule(runs, method):
    rounds = [r for r in runs[method]["rounds"] if r["round"] > 0]
    first = rounds[0]
    assert STEP_NOISE_DEFAULT < STEP_NOISE_BOUND
    assert first["fit_step_noise_norm"] == pytest.approx(STEP_NOISE_DEFAULT, rel=1e-5), method
    assert all(r["fit_step_noise_norm"] <= STEP_NOISE_DEFAULT * (1 + 1e-5) for r in rounds), method
    if method == "doadp":  # alpha = step_noise_norm / (sigma sqrt(d)), d = 64 * 10 + 10 for logreg on digits
        assert first["fit_alpha"] == pytest.approx(STEP_NOISE_DEFAULT / (first["fit_sigma"] * math.sqrt(650)), rel=1e-9)
    elif method == "dp-dda":  # the step 1/beta0 by the same rule
        assert first["fit_beta0"] == pytest.approx(first["fit_sigma"] * math.sqrt(650) / STEP_NOISE_DEFAULT, rel=1e-9)


@pytest.mark.parametrize("method", DOADP_METHODS)
def test_default_run_learns(runs, method):
    ok, numbers = learned(runs[method]["rounds"])
    assert ok, (method, numbers)


@pytest.mark.parametrize("seed", [s for s in DOADP_CLIENT_SEEDS["dp-dda"] if s != 0])
def test_dpdda_default_learns_at_every_seed_of_the_table(seed):
    """Seed 2 stayed at chance (0.070 -> 0.070) while DP-DDA clipped per coordinate: the class-independent
    part of the clamped softmax gradients swamped the part that separates the classes, and no step size
    changes the direction of the dual sum (beta0 from 0.3 to 4.9 gave the same accuracies)."""
    res = run_experiment(ExperimentConfig(method="dp-dda", client_seed=seed, progress=False))
    ok, numbers = learned(res["rounds"])
    assert ok, (seed, numbers)


def test_the_laplace_baselines_default_epsilon_is_their_own(runs):
    eps = {m: runs[m]["params"]["epsilon"] for m in PRIVATE}
    assert eps["doadp"] == eps["dp-dda"] == 4.0 and eps["dpdo"] == eps["cpgt"] == 512.0, eps
    assert runs["dpdo"]["provenance"]["params"]["epsilon"].startswith("project: the smallest power of 2")


@pytest.mark.parametrize("method", LAPLACE)
def test_the_laplace_baselines_do_not_learn_at_doadps_epsilon(equal_epsilon_runs, method):
    ok, numbers = learned(equal_epsilon_runs[method]["rounds"])
    assert not ok, (method, numbers)


def test_doadp_ahead_of_the_baselines_at_equal_epsilon(runs, equal_epsilon_runs):
    """Ahead of DPDO and CPGT in accuracy, and below DP-DDA's final loss (DP-DDA's accuracy is ahead of
    DO-ADP's at 3 of the doadp-defaults table's 4 seeds)."""
    compared = {"doadp": runs["doadp"], "dp-dda": runs["dp-dda"], **equal_epsilon_runs}
    eps = {m: r["params"]["epsilon"] for m, r in compared.items()}
    assert len(set(eps.values())) == 1, eps
    acc = {m: r["summary"]["final_accuracy"] for m, r in compared.items()}
    assert acc["doadp"] > acc["dpdo"] + 0.1 and acc["doadp"] > acc["cpgt"] + 0.1, acc
    loss = {m: [x for x in r["rounds"] if x.get("loss") is not None][-1]["loss"] for m, r in compared.items()}
    assert loss["doadp"] < loss["dp-dda"], loss


def test_dpdda_starts_on_its_defaults_with_a_certified_sigma(runs):
    last = runs["dp-dda"]["rounds"][-1]
    assert last["fit_dp_epsilon"] <= runs["dp-dda"]["params"]["epsilon"] * (1 + 1e-9)


def test_an_instruction_carries_one_step_size():
    cfg = ExperimentConfig(method="doadp", rounds=2, progress=False).validate()
    exp = Experiment(cfg)
    core = get_method("doadp").build_core(exp.server_setup(), dict(exp.params))
    (ins,) = core.configure_train(1, [0])
    assert "lr" not in ins.config and ins.config["doadp_alpha"] == pytest.approx(core.alpha)
    assert core.privacy_report()["alpha_rule"].startswith("auto: step_noise_norm")


def test_auto_is_refused_where_no_rule_sets_the_step():
    for method in ("fedavg", "dmsgd"):
        with pytest.raises(SettingError, match="has no rule that derives its step size"):
            ExperimentConfig(method=method, lr="auto").validate()
    with pytest.raises(ValueError, match="D-mSGD adds no noise"):
        DMSGDServer([np.zeros(8)], num_partitions=3, num_rounds=2, dataset_size=10, alpha="auto", batch_size=2)


def test_step_noise_norm_must_stay_below_the_bound():
    with pytest.raises(ValueError, match="step_noise_norm"):
        DOADPConfig(step_noise_norm=STEP_NOISE_BOUND)


def test_defaults_command_prints_the_step_that_runs(runs, capsys):
    from flwr_strategies.simulations import cli

    assert cli.main(["defaults", "doadp"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("lr auto on these defaults: step "), line
    assert float(line.split()[6]) == pytest.approx(runs["doadp"]["rounds"][1]["fit_alpha"], rel=1e-5)
