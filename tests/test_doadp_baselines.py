"""Baselines of Table I (DPDO, DP-DDA, CPGT): privacy calibration and learning without noise."""

import math

import numpy as np
import pytest

from flwr_strategies.doadp.baseline_server import CPGTServer, DPDDAServer, DPDOServer
from flwr_strategies.doadp.baselines import BatchGrad, run_cpgt, run_dpdda, run_dpdo
from flwr_strategies.doadp.config import CPGTConfig, DPDDAConfig, DPDOConfig
from flwr_strategies.doadp.graphs import circulant_mixing
from flwr_strategies.doadp.problems import LogRegProblem, synthetic_binary
from flwr_strategies.privacy import (
    calibrate_laplace_b0,
    doadp_sigma,
    geometric_laplace_epsilon,
    geometric_laplace_scale,
    pure_dp_epsilon,
)

pytestmark = pytest.mark.filterwarnings("ignore:DO-ADP accountant")
SEEDS = list(range(10))


@pytest.fixture(scope="module")
def small():
    A, B = synthetic_binary(10, 30, 8, seed=2)
    prob = LogRegProblem(A, B)
    return prob, circulant_mixing(10, 2), prob.solve()[1]


def test_laplace_calibrations():
    s0 = 2 * math.sqrt(2000) * 0.001 / 20000
    b0 = geometric_laplace_scale(0.01, s0, 0.99, 0.995)
    assert b0 == pytest.approx(2 * math.sqrt(2000) * 0.001 / (20000 * 0.01 * 0.005), rel=1e-12)
    # the infinite-horizon epsilon of the geometric scheme is at most the budget, finite T below it
    assert geometric_laplace_epsilon(b0, s0, 0.99, 0.995) <= 0.01 + 1e-15
    assert geometric_laplace_epsilon(b0, s0, 0.99, 0.995, T=100) < geometric_laplace_epsilon(b0, s0, 0.99, 0.995)
    # finite horizon, no amplification: the calibrated b0 spends exactly the budget (closed form)
    t = np.arange(100)
    b1 = calibrate_laplace_b0(0.5, s0 * 0.99**t, 0.995**t)
    assert pure_dp_epsilon(s0 * 0.99**t, b1 * 0.995**t) == pytest.approx(0.5, rel=1e-5)
    assert b1 == pytest.approx(s0 * np.sum((0.99 / 0.995) ** t) / 0.5, rel=1e-5)
    # amplification by a b/q batch draw needs less noise for the same budget
    assert calibrate_laplace_b0(0.5, s0 * 0.99**t, 0.995**t, rate=0.1) < b1
    with pytest.raises(ValueError, match="rs="):
        geometric_laplace_scale(1.0, 1.0, 0.995, 0.99)


def _arrays(d=8):
    return [np.zeros(d, np.float32)]


def test_dpdo_core_certifies_its_budget():
    core = DPDOServer(_arrays(), num_partitions=4, num_rounds=50, dataset_size=100, alpha=0.05, batch_size=10,
                      config=DPDOConfig(epsilon=0.7))
    assert core.epsilon_at(50) == pytest.approx(0.7, rel=1e-4) and core.epsilon_at(50) <= 0.7
    assert core.epsilon_at(10) < core.epsilon_at(50)


def test_dpdda_sigma_is_doadp_chain_with_ps_and_kd():
    core = DPDDAServer(_arrays(), num_partitions=4, num_rounds=20, dataset_size=30, batch_size=1,
                       config=DPDDAConfig(epsilon=0.5, delta0=1e-6, p_s=0.24, calibration="theorem1"))
    assert core.sigma == doadp_sigma(0.5, 1e-6, 20, 0.24, 8, 8, 30, 1.0, allow_low_p=True)
    assert core.planned_epsilon <= 0.5


def test_cpgt_reports_an_uncertified_heuristic():
    core = CPGTServer(_arrays(), num_partitions=4, num_rounds=10, dataset_size=30, batch_size=2,
                      config=CPGTConfig(epsilon=0.5, k_frac=0.25))
    core.configure_train(1, list(range(4)))
    m = core.aggregate_train(10, [], [])
    assert m["dp_certified"] == 0 and m["epsilon_heuristic"] == pytest.approx(0.5, rel=1e-4)
    assert core.privacy_report()["certified"] is False


def test_baselines_learn_without_noise(small):
    prob, W, fs = small
    x0 = np.zeros(prob.d)
    f0 = prob.objective(x0) - fs
    ev = lambda t, xb, X: {"sub": prob.objective(X.mean(axis=0)) - fs}  # noqa: E731
    bg = BatchGrad(batch_size=5, clip=10.0)
    h1 = run_dpdo(prob, W, x0, b0=1e-12, c=0.5, T=300, rs=0.999, rn=0.9995, bg=bg, client_seeds=SEEDS,
                  evaluate=ev, eval_every=300)
    h2 = run_dpdda(prob, W, x0, sigma=0.0, T=300, p_s=0.5, beta0=0.3, reg=1.0 / prob.q, bg=bg, client_seeds=SEEDS,
                   evaluate=ev, eval_every=300)
    h3 = run_cpgt(prob, W, x0, b0=1e-12, k=4, lr=0.5, T=300, rs=0.9999, rn=0.99995, bg=bg, client_seeds=SEEDS,
                  evaluate=ev, eval_every=300)
    for name, h in (("dpdo", h1), ("dpdda", h2), ("cpgt", h3)):
        assert h["sub"][-1] < 0.7 * f0, (name, h["sub"], f0)
    assert h3["comm_rate"] == pytest.approx(2 * 4 / prob.d)
    again = run_cpgt(prob, W, x0, b0=0.1, k=4, lr=0.5, T=30, bg=bg, client_seeds=SEEDS)
    assert np.array_equal(again["xbar"], run_cpgt(prob, W, x0, b0=0.1, k=4, lr=0.5, T=30, bg=bg,
                                                  client_seeds=SEEDS)["xbar"])
