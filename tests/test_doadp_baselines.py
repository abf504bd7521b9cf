"""Baselines of Table I (DPDO, DP-DDA, CPGT) and their privacy calibration."""

import math

import numpy as np
import pytest

from flwr_strategies.doadp.baselines import cpgt_noise_scale, dpdo_noise_scale, run_cpgt, run_dpdda, run_dpdo
from flwr_strategies.doadp.graphs import circulant_mixing
from flwr_strategies.doadp.problems import LogRegProblem, synthetic_binary
from flwr_strategies.privacy import doadp_sigma, geometric_laplace_epsilon, geometric_laplace_scale

pytestmark = pytest.mark.filterwarnings("ignore:DO-ADP accountant")


@pytest.fixture(scope="module")
def small():
    A, B = synthetic_binary(10, 30, 8, seed=2)
    prob = LogRegProblem(A, B)
    return prob, circulant_mixing(10, 2), prob.solve()[1]


def test_laplace_calibrations():
    b0 = dpdo_noise_scale(0.01, 1.0, 2000, 20000, 0.001, 0.99, 0.995)
    assert b0 == pytest.approx(2 * math.sqrt(2000) * 0.001 / (20000 * 0.01 * 0.005), rel=1e-12)
    s0 = 2 * math.sqrt(2000) * 0.001 / 20000
    # the infinite-horizon epsilon of the geometric scheme is at most the budget, finite T below it
    assert geometric_laplace_epsilon(b0, s0, 0.99, 0.995) <= 0.01 + 1e-15
    assert geometric_laplace_epsilon(b0, s0, 0.99, 0.995, T=100) < geometric_laplace_epsilon(b0, s0, 0.99, 0.995)
    assert cpgt_noise_scale(0.5, 1.0, 50, 100, 0.01, 0.99, 0.995) == pytest.approx(
        geometric_laplace_scale(0.25, 2 * math.sqrt(50) * 0.01 / 100, 0.99, 0.995))
    with pytest.raises(ValueError, match="rs="):
        geometric_laplace_scale(1.0, 1.0, 0.995, 0.99)


def test_dpdda_sigma_is_doadp_chain_with_ps_and_kd(small):
    prob, W, fs = small
    h = run_dpdda(prob, W, np.zeros(prob.d), epsilon=0.5, delta0=1e-6, T=20, p_s=0.24, eval_every=20)
    assert h["sigma"] == doadp_sigma(0.5, 1e-6, 20, 0.24, prob.d, prob.d, prob.q, 1.0, allow_low_p=True)
    assert h["comm_rate"] == 1.0


def test_baselines_learn_without_noise_and_are_deterministic(small):
    prob, W, fs = small
    x0 = np.zeros(prob.d)
    f0 = prob.objective(x0) - fs
    ev = lambda t, xb, X: {"sub": prob.objective(xb) - fs}  # noqa: E731
    h1 = run_dpdo(prob, W, x0, epsilon=1e9, T=300, c=0.5, rs=0.999, rn=0.9995, evaluate=ev, eval_every=300)
    h2 = run_dpdda(prob, W, x0, epsilon=1.0, delta0=1e-5, T=300, p_s=0.5, beta0=0.3, sigma=0.0, reg=0.0,
                   evaluate=ev, eval_every=300)
    h3 = run_cpgt(prob, W, x0, epsilon=1e9, T=300, k=4, lr=0.5, rs=0.9999, rn=0.99995, evaluate=ev, eval_every=300)
    for name, h in (("dpdo", h1), ("dpdda", h2), ("cpgt", h3)):
        assert h["sub"][-1] < 0.5 * f0, (name, h["sub"], f0)
    assert h3["comm_rate"] == pytest.approx(2 * 4 / prob.d)
    again = run_cpgt(prob, W, x0, epsilon=0.5, T=30, k=4, lr=0.5, seed=3)
    assert np.array_equal(again["xbar"], run_cpgt(prob, W, x0, epsilon=0.5, T=30, k=4, lr=0.5, seed=3)["xbar"])
