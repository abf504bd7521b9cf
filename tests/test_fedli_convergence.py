"""Convergence oracles of spec 001: O9 (linear rate, shared minimizer), O10 (descent with homogeneous
clients) and O12 (FedLi-LS beats fixed-step FedAvg on L2-regularised logistic regression)."""

import numpy as np
import torch
import torch.nn.functional as F

from flwr_strategies.fedli import (
    ArmijoConfig,
    aggregation_weights,
    armijo_local_train,
    armijo_step,
    gd_server_step,
    weighted_average,
)

torch.set_num_threads(1)


def _armijo_eta_for_curvature(a, c, beta, eta0):
    """Independent derivation: first beta^j * eta0 with (1 - eta a)^2 <= 1 - 2 c eta a."""
    eta = eta0
    while (1 - eta * a) ** 2 > 1 - 2 * c * eta * a:
        eta *= beta
    return eta


def test_o9_linear_convergence_shared_minimizer():
    d, K = 10, 5
    a = np.linspace(1, 10, 10)
    rng = np.random.default_rng(0)
    w_star = rng.standard_normal(d)
    w_glob = w_star + 0.4 * rng.standard_normal(d) / np.sqrt(d)
    cfg = ArmijoConfig(eta_max=1.0, armijo_c=0.1, backtrack_factor=0.9, reset_option=1, grad_tol=0.0)
    # Lemma 2 (discrete form): every accepted eta lies in [min(1, beta*2(1-c)/a), min(1, 2(1-c)/a)], so one
    # local step contracts the error by at most max |1 - eta a| over that interval, and K steps by its K-th power
    per_step = [max(abs(1 - min(1.0, 0.9 * 1.8 / ai) * ai), abs(1 - min(1.0, 1.8 / ai) * ai)) for ai in a]
    q_bound = float(np.mean([p**K for p in per_step]))
    # away from the Armijo boundary the accepted step is exactly the first beta^j below it
    q_typical = float(np.mean([(1 - _armijo_eta_for_curvature(ai, 0.1, 0.9, 1.0) * ai) ** K for ai in a]))
    assert abs(q_typical) <= q_bound < 1
    ws = torch.tensor(w_star)
    err = np.linalg.norm(w_glob - w_star)
    rounds = 0
    while err > 1e-12 and rounds < 60:
        client_models = []
        for ai in a:
            w = torch.tensor(w_glob, requires_grad=True)
            eta = cfg.eta_max
            for k in range(1, K + 1):
                eta = armijo_step([w], lambda: 0.5 * ai * torch.sum((w - ws) ** 2), eta, k, cfg).step_size
            client_models.append([w.detach().numpy().copy()])
        new = gd_server_step([w_glob], weighted_average(client_models, aggregation_weights([1] * 10)), 1.0)[0]
        new_err = np.linalg.norm(new - w_star)
        assert new_err <= q_bound * err * (1 + 1e-9)  # linear rate, every round
        w_glob, err = new, new_err
        rounds += 1
    assert err <= 1e-12 and rounds <= 30


def _logreg_problem(n=2000, d=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w_true = torch.randn(d, generator=g)
    y = ((x @ w_true + 0.5 * torch.randn(n, generator=g)) > 0).float()
    return x, y


class LogReg(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = torch.nn.Linear(d, 1)
        torch.nn.init.zeros_(self.lin.weight)
        torch.nn.init.zeros_(self.lin.bias)

    def forward(self, x):
        return self.lin(x).squeeze(-1)


def _reg_loss(model, lam=1e-3):
    def loss_fn(out, y):
        return F.binary_cross_entropy_with_logits(out, y) + 0.5 * lam * torch.sum(model.lin.weight**2)

    return loss_fn


def _get(model):
    return [p.detach().numpy().copy() for p in model.parameters()]


def _set(model, arrays):
    with torch.no_grad():
        for p, a in zip(model.parameters(), arrays):
            p.copy_(torch.from_numpy(a))


def _batches(n, b, gen):
    perm = torch.randperm(n, generator=gen)
    return [perm[i : i + b] for i in range(0, n, b)]


def _full_loss(model, x, y):
    with torch.no_grad():
        return float(_reg_loss(model)(model(x), y))


def test_o10_global_descent_homogeneous_clients():
    x, y = _logreg_problem(n=300, d=5, seed=1)
    model = LogReg(5)
    glob = _get(model)
    f_prev = _full_loss(model, x, y)
    for t in range(8):
        models = []
        for i in range(3):  # identical objective, full-batch gradients
            _set(model, glob)
            gen = torch.Generator().manual_seed(100 * t + i)
            armijo_local_train(model, [(x, y)] * 4, ArmijoConfig(), gen, batch_fraction=1.0, loss_fn=_reg_loss(model))
            models.append(_get(model))
        glob = gd_server_step(glob, weighted_average(models, aggregation_weights([300] * 3)), 1.0)
        _set(model, glob)
        f_new = _full_loss(model, x, y)
        assert f_new <= f_prev + 1e-7
        f_prev = f_new


def _run_fl(x, y, rounds, local, seed=0):
    n_clients = 10
    parts = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed)).chunk(n_clients)
    model = LogReg(x.shape[1])
    glob = _get(model)
    for t in range(rounds):
        models, ns = [], []
        for i, idx in enumerate(parts):
            _set(model, glob)
            gen = torch.Generator().manual_seed(seed * 100_000 + t * 100 + i)
            local(model, x[idx], y[idx], _batches(len(idx), 32, gen), gen)
            models.append(_get(model))
            ns.append(len(idx))
        glob = gd_server_step(glob, weighted_average(models, aggregation_weights(ns)), 1.0)
    _set(model, glob)
    return _full_loss(model, x, y)


def test_o12_logistic_regression_ls_beats_fixed_step_fedavg():
    x, y = _logreg_problem(n=1000)  # spec: 2000 x 20, 50 rounds; halved to keep the test < 20 s on 2 shared cores

    def armijo(model, xi, yi, batches, gen):
        pairs = ((xi[i], yi[i]) for i in batches)
        armijo_local_train(model, pairs, ArmijoConfig(), gen, batch_fraction=32 / len(xi), loss_fn=_reg_loss(model))

    def sgd(model, xi, yi, batches, gen):
        loss_fn = _reg_loss(model)
        for idx in batches:
            model.zero_grad()
            loss_fn(model(xi[idx]), yi[idx]).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.01)

    f_ls = _run_fl(x, y, 25, armijo)
    f_avg = _run_fl(x, y, 25, sgd)
    f0 = float(np.log(2.0))  # loss of the zero initialisation
    assert f_ls < f_avg < f0
