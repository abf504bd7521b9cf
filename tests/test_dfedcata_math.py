"""DFedCata oracles (spec section 8): local solver closed forms, reductions, Lemmas 4 and 6."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from flwr_strategies.decentralized import Topology, mixing_matrix
from flwr_strategies.dfedcata import extrapolate, lr_at_round, validate_dfedcata
from flwr_strategies.core.local import index_batches
from flwr_strategies.dfedcata.local import local_update
from flwr_strategies.dfedcata.reference import simulate


class Vec(torch.nn.Module):
    def __init__(self, x0):
        super().__init__()
        self.p = torch.nn.Parameter(torch.tensor(x0, dtype=torch.float64))


def _run_local(x0, loss, **kw):
    model = Vec(x0)
    dummy = torch.zeros(8, 1)
    kw.setdefault("batch_size", 8)
    local_update(model, dummy, torch.zeros(8, dtype=torch.long), generator=torch.Generator().manual_seed(0),
                 loss_fn=lambda mdl, xb, yb: loss(mdl.p), **kw)
    return model.p.detach().numpy()


@pytest.mark.parametrize("lam", [0.0, 0.05, 0.5])
@pytest.mark.parametrize("K", [1, 5, 20])
def test_constant_gradient_displacement(lam, K):
    # oracle 8 and 10: x_K - x_0 = -((1 - (1 - eta lam)^K) / lam) a  (lam -> 0: -K eta a)
    eta = 0.1
    a = np.array([1.0, -2.0, 0.5])
    x0 = np.array([0.3, 0.1, -0.7])
    xK = _run_local(x0, lambda p: (torch.tensor(a) * p).sum(), lr=eta, steps=K, lam=lam)
    coef = K * eta if lam == 0 else (1 - (1 - eta * lam) ** K) / lam
    np.testing.assert_allclose(xK - x0, -coef * a, rtol=1e-12, atol=1e-14)
    gammas = [eta * lam * (1 - eta * lam) ** (K - 1 - k) for k in range(K)]
    assert sum(gammas) == pytest.approx(1 - (1 - eta * lam) ** K)
    assert sum(gammas) <= K * eta * lam + 1e-15


@pytest.mark.parametrize("lam", [0.0, 0.05, 0.3])
def test_quadratic_closed_form(lam):
    # oracle 9: f = 1/2||x - c||^2, x* = (c + lam x0)/(1 + lam), x_k - x* = (1 - eta(1+lam))^k (x0 - x*)
    eta, K = 0.1, 7
    c = np.array([1.0, 2.0, -3.0])
    x0 = np.array([-1.0, 0.5, 0.0])
    xK = _run_local(x0, lambda p: 0.5 * ((p - torch.tensor(c)) ** 2).sum(), lr=eta, steps=K, lam=lam)
    xs = (c + lam * x0) / (1 + lam)
    np.testing.assert_allclose(xK - xs, (1 - eta * (1 + lam)) ** K * (x0 - xs), rtol=1e-12, atol=1e-14)


def test_single_step_lambda_has_no_effect():
    # oracle 6: prox gradient is zero at the anchor
    f = lambda p: (p**3).sum()  # noqa: E731
    x0 = np.array([0.4, -0.2])
    np.testing.assert_array_equal(_run_local(x0, f, lr=0.1, steps=1, lam=0.0), _run_local(x0, f, lr=0.1, steps=1, lam=0.5))
    assert not np.array_equal(_run_local(x0, f, lr=0.1, steps=3, lam=0.0), _run_local(x0, f, lr=0.1, steps=3, lam=0.5))


def test_heavy_ball_and_sam_rules():
    eta, theta = 0.1, 0.9
    a = np.array([1.0, 2.0])
    x0 = np.zeros(2)
    # constant gradient, heavy ball: v_{k+1} = theta v_k - eta a -> x_K = -eta a sum_k (1-theta^(k+1))/(1-theta)
    xK = _run_local(x0, lambda p: (torch.tensor(a) * p).sum(), lr=eta, steps=3, momentum=theta)
    coef = sum((1 - theta ** (k + 1)) / (1 - theta) for k in range(3))
    np.testing.assert_allclose(xK, -eta * coef * a, rtol=1e-12)
    # SAM on f = 1/2||x||^2: g = x, e = rho x/||x||, step uses grad at x + e = x (1 + rho/||x||)
    x0 = np.array([3.0, 4.0])
    rho = 0.1
    x1 = _run_local(x0, lambda p: 0.5 * (p**2).sum(), lr=eta, steps=1, rho=rho)
    np.testing.assert_allclose(x1, x0 - eta * x0 * (1 + rho / 5.0), rtol=1e-12)


def test_clipping_applies_to_data_gradient_only():
    a = np.array([30.0, 40.0])  # norm 50
    x0 = np.zeros(2)
    x1 = _run_local(x0, lambda p: (torch.tensor(a) * p).sum(), lr=0.1, steps=1, clip_norm=10.0)
    np.testing.assert_allclose(x1, -0.1 * a / 50 * 10, rtol=1e-6)


def test_batch_indices_units():
    g = torch.Generator().manual_seed(1)
    assert len(list(index_batches(10, 4, g, epochs=2))) == 6  # 3 batches per pass
    assert len(list(index_batches(10, 4, g, steps=5))) == 5
    with pytest.raises(ValueError, match="exactly one"):
        list(index_batches(10, 4, g, epochs=1, steps=1))


# ---------------------------------------------------------------- reference simulator
M, D = 8, 5
RNG = np.random.default_rng(0)
C = RNG.standard_normal((M, D))


def quad_local(eta=0.1, lam=0.05, K=4):
    def fn(i, t, x0):
        xs = (C[i] + lam * x0) / (1 + lam)
        return xs + (1 - eta * (1 + lam)) ** K * (x0 - xs)

    return fn


def _random_W(t):
    return mixing_matrix(Topology("random", M, seed=3, neighbours=4).graph(t), allow_disconnected=True)


X0 = np.tile(RNG.standard_normal(D), (M, 1))


def test_lemma4_and_lemma6_average_dynamics():
    beta = 0.7
    h = simulate(X0, quad_local(), _random_W, 6, beta=beta, history=True)
    xbar = [X.mean(axis=0) for X in h["X"]]
    for t in range(6):
        delta = (h["YK"][t] - h["Y0"][t]).mean(axis=0)
        prev = xbar[t - 1] if t > 0 else xbar[0]
        np.testing.assert_allclose(xbar[t + 1], xbar[t] + beta * (xbar[t] - prev) + delta, atol=1e-12)  # Lemma 4
        z = lambda s: xbar[s] + beta / (1 - beta) * (xbar[s] - (xbar[s - 1] if s > 0 else xbar[0]))  # noqa: E731
        np.testing.assert_allclose(z(t + 1) - z(t), delta / (1 - beta), atol=1e-12)  # Lemma 6


def test_round_zero_has_no_extrapolation_and_state_shift():
    h = simulate(X0, quad_local(), _random_W, 2, beta=0.9, history=True)
    np.testing.assert_array_equal(h["Y0"][0], X0)  # oracle 20
    np.testing.assert_allclose(h["Y0"][1], h["X"][1] + 0.9 * (h["X"][1] - h["X"][0]))  # oracle 21


def test_full_mixing_is_fedavg_and_heavy_ball():
    W = lambda t: sp.csr_matrix(np.full((M, M), 1.0 / M))  # noqa: E731
    # oracle 3: beta = lam = 0 -> identical clients equal to FedAvg with uniform weights
    loc = quad_local(lam=0.0)
    h = simulate(X0, loc, W, 4, beta=0.0, history=True)
    x = X0[0].copy()
    for t in range(4):
        x = np.mean([loc(i, t, x.copy()) for i in range(M)], axis=0)
        np.testing.assert_allclose(h["X"][t + 1], np.tile(x, (M, 1)), atol=1e-12)
    # oracle 4: beta > 0 -> server heavy ball in look-ahead form
    beta = 0.5
    h = simulate(X0, loc, W, 4, beta=beta, history=True)
    x_prev, x = X0[0].copy(), X0[0].copy()
    for t in range(4):
        y0 = x + beta * (x - x_prev)
        delta = np.mean([loc(i, t, y0.copy()) - y0 for i in range(M)], axis=0)
        x_prev, x = x, x + beta * (x - x_prev) + delta
        np.testing.assert_allclose(h["X"][t + 1], np.tile(x, (M, 1)), atol=1e-12)


def test_identity_mixing_decouples_clients():
    # oracle 5
    beta = 0.6
    loc = quad_local()
    h = simulate(X0, loc, lambda t: sp.identity(M, format="csr"), 3, beta=beta, history=True)
    for i in range(M):
        xp, x = X0[i].copy(), X0[i].copy()
        for t in range(3):
            y0 = x + beta * (x - xp)
            xp, x = x, loc(i, t, y0.copy())
        np.testing.assert_allclose(h["X"][3][i], x, atol=1e-12)


def test_prev_local_keeps_average_of_start_points():
    # oracle 16
    h = simulate(X0 + RNG.standard_normal((M, D)), quad_local(), _random_W, 4, beta=0.9, anchor="prev_local", history=True)
    for t in range(4):
        np.testing.assert_allclose(h["Y0"][t].mean(axis=0), h["X"][t].mean(axis=0), atol=1e-12)


def test_consensus_invariance_row_stochastic():
    # oracle 17: identical clients stay identical under any row-stochastic W
    same = lambda i, t, x0: x0 - 0.1 * (x0 - 1.0)  # noqa: E731
    Wrow = lambda t: mixing_matrix(Topology("random", M, seed=1, neighbours=4).graph(t), "uniform",  # noqa: E731
                                   allow_row_stochastic=True, allow_disconnected=True)
    for anchor in ("prev_mixed", "prev_local"):
        X = simulate(X0, same, Wrow, 5, beta=0.9, anchor=anchor)
        assert np.ptp(X, axis=0).max() < 1e-12


def test_sequential_inplace_is_order_dependent_but_exact_without_coupling():
    loc = quad_local()
    sync = simulate(X0, loc, lambda t: sp.identity(M, format="csr"), 3, beta=0.5, anchor="prev_local")
    seq = simulate(X0, loc, lambda t: sp.identity(M, format="csr"), 3, beta=0.5, anchor="prev_local", sequential_inplace=True)
    # with W = I the prev_local anchor is the previous local model in both modes
    np.testing.assert_allclose(seq, sync, atol=1e-12)
    # with coupling, client 1 sees client 0's new model in the same round (2 clients, full W)
    W = lambda t: sp.csr_matrix(np.full((2, 2), 0.5))  # noqa: E731
    step = lambda i, t, x0: x0 + (i + 1.0)  # noqa: E731
    x = simulate(np.zeros((2, 1)), step, W, 1, sequential_inplace=True)
    # client 0: z = 0 -> 1;  client 1: z = (1 + 0)/2 -> 0.5 + 2
    np.testing.assert_allclose(x.ravel(), [1.0, 2.5])
    xs = simulate(np.zeros((2, 1)), step, W, 1)
    np.testing.assert_allclose(xs.ravel(), [1.5, 1.5])


def test_extrapolate_beta_zero_is_bit_exact_copy():
    X = RNG.standard_normal((3, 4)).astype(np.float32)
    Y = extrapolate(X, X * 7, 0.0)
    assert Y is not X and np.array_equal(Y, X)
    np.testing.assert_allclose(extrapolate(X, X - 1, 0.5), X + 0.5, rtol=1e-6)


def test_validation_and_lr_schedule():
    for bad in (-0.1, 1.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="beta"):
            validate_dfedcata(bad, 0.05)
    with pytest.raises(ValueError, match="lam"):
        validate_dfedcata(0.9, -0.01)
    with pytest.raises(ValueError, match="lr \\* lam"):
        validate_dfedcata(0.9, 10.0, lr=0.1)
    with pytest.raises(ValueError, match="extrapolation_anchor"):
        validate_dfedcata(0.9, 0.05, anchor="prev")
    validate_dfedcata(0.0, 0.0, lr=0.1)
    # oracle 24
    assert lr_at_round(0.1, 0.998, 500) == pytest.approx(0.036751, abs=1e-6)
    assert lr_at_round(0.1, 0.998, 200) == pytest.approx(0.067005, abs=1e-6)
