"""Server-side oracles of spec 001: O7/O8 (FedLi-LS), O14-O19 (FedLi-LU DFW), O21 (FedExP),
O22 (SCAFFOLD), O23 (weights), and the bad-input behaviour (non-finite reports, all-zero delta)."""

import itertools
import warnings

import numpy as np
import pytest
import torch
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
from flwr.server.strategy.aggregate import aggregate_inplace

from flwr_strategies.fedli import (
    DFW_PRESETS,
    DFWConfig,
    DFWServerStep,
    aggregate_delta,
    aggregation_weights,
    dfw_gamma,
    fedexp_server_step,
    fedexp_step_size,
    function_sync,
    gd_server_step,
    scaffold_client_control_update,
    scaffold_local_sgd,
    scaffold_server_update,
    step_size_sync,
    weighted_average,
)

torch.set_num_threads(1)


def _models(rng, s=4, shapes=((3, 2), (2,), (5,))):
    return [[rng.standard_normal(sh).astype(np.float32) for sh in shapes] for _ in range(s)]


def _fitres(arrays, n):
    return FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), n, {})


# ------------------------------------------------------------------ O23 weights / O7 reduction to FedAvg
def test_o23_weights_sum_to_one_and_zero_clients_contribute_nothing():
    p = aggregation_weights([10, 0, 30])
    assert p.sum() == pytest.approx(1.0) and p[1] == 0.0
    np.testing.assert_allclose(p, [0.25, 0.0, 0.75])
    u = aggregation_weights([10, 0, 30], "uniform")
    np.testing.assert_allclose(u, [1 / 3] * 3)
    rng = np.random.default_rng(0)
    m = _models(rng, 3)
    m[1] = [x + 1e3 for x in m[1]]
    avg = weighted_average(m, p)
    ref = weighted_average([m[0], m[2]], aggregation_weights([10, 30]))
    for a, b in zip(avg, ref):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    with pytest.raises(ValueError, match="num_examples = 0"):
        aggregation_weights([0, 0])
    with pytest.raises(ValueError, match="weighting"):
        aggregation_weights([1], "median")


def test_o7_unit_step_is_bit_identical_to_flower_fedavg():
    rng = np.random.default_rng(1)
    g = [rng.standard_normal(s).astype(np.float32) for s in ((3, 2), (2,), (5,))]
    models = _models(rng, 5)
    ns = [17, 3, 40, 8, 21]
    flwr_avg = aggregate_inplace([(None, _fitres(m, n)) for m, n in zip(models, ns)])
    ours = gd_server_step(g, weighted_average(models, aggregation_weights(ns)), step_size_sync([0.3] * 5, "unit"))
    for a, b in zip(ours, flwr_avg):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_o8_max_mode_single_client():
    rng = np.random.default_rng(2)
    g = [rng.standard_normal((4,)).astype(np.float64)]
    m = [[rng.standard_normal((4,))]]
    eta = step_size_sync([0.37], "max")
    assert eta == 0.37
    new = gd_server_step(g, weighted_average(m, [1.0]), eta)
    np.testing.assert_allclose(new[0], g[0] - 0.37 * (g[0] - m[0][0]), rtol=1e-14)
    assert step_size_sync([0.1, 0.5, 0.2], "max") == 0.5
    assert step_size_sync([0.1, 0.5], 2.5) == 2.5


def test_step_size_sync_rejects_bad_reports_and_modes():
    with pytest.raises(FloatingPointError, match="non-finite step size"):
        step_size_sync([0.1, float("nan")], "unit")
    with pytest.raises(FloatingPointError):
        step_size_sync([float("inf")], "max")
    with pytest.raises(ValueError, match="<= 0"):
        step_size_sync([0.0], "max")
    for bad in ("mean", -1.0, 0.0, float("nan")):
        with pytest.raises(ValueError, match="step_size_sync"):
            step_size_sync([0.1], bad)


def test_o11_nonconvex_average_can_ascend():
    f = lambda x: x**3  # noqa: E731 -- f = (f1 + f2)/2 with f1 = 3x^3 - x^2, f2 = x^2 - x^3 ... times 1/2*2
    f1 = lambda x: 3 * x**3 - x**2  # noqa: E731
    f2 = lambda x: x**2 - x**3  # noqa: E731
    assert f1(0.8) < f1(1.0) and f2(1.5) < f2(1.0)
    new = gd_server_step([np.array([1.0])], weighted_average([[np.array([0.8])], [np.array([1.5])]], [0.5, 0.5]), 1.0)
    assert new[0][0] == pytest.approx(1.15)
    assert 0.5 * (f1(new[0][0]) + f2(new[0][0])) == pytest.approx(f(1.15)) == pytest.approx(1.520875)
    assert f(1.15) > f(1.0)


def test_all_zero_delta_is_a_no_op_for_ls():
    g = [np.ones(3, np.float32)]
    new = gd_server_step(g, weighted_average([g, g], [0.5, 0.5]), 3.0)
    assert np.array_equal(new[0], g[0])


# ------------------------------------------------------------------ DFW (FedLi-LU)
def test_o14_closed_form():
    step = DFWServerStep(DFWConfig(server_eta=1.0, server_weight_decay=0.1, server_momentum=0.0, dfw_eps=1e-5))
    w = [np.array([1.0, 2.0])]
    avg = [w[0] - np.array([0.5, -0.5])]  # Delta = [0.5, -0.5]
    new, info = step.step(w, avg, 0.2)
    assert info["gamma"] == pytest.approx(0.25 / 0.50001, rel=1e-12)
    assert info["gamma"] == pytest.approx(0.4999900, abs=1e-7)
    np.testing.assert_allclose(new[0], [0.650005, 2.049995], atol=1e-6)


def test_o15_range_and_never_further_than_eta_delta():
    rng = np.random.default_rng(3)
    for _ in range(200):
        eta = float(10 ** rng.uniform(-3, 1))
        lam = float(rng.choice([0.0, 10 ** rng.uniform(-5, -1)]))
        cfg = DFWConfig(server_eta=eta, server_weight_decay=lam, dfw_eps=1e-5)
        w = [rng.standard_normal((3, 4)).astype(np.float64), rng.standard_normal(5)]
        avg = [x - rng.standard_normal(x.shape) * 10 ** rng.uniform(-4, 1) for x in w]
        f = float(10 ** rng.uniform(-6, 2))
        new, info = DFWServerStep(cfg).step(w, avg, f)
        assert 0.0 <= info["gamma"] <= 1.0
        assert 0.0 <= info["effective_scale"] <= eta
        flat = lambda xs: np.concatenate([x.ravel() for x in xs])  # noqa: E731
        delta = flat(w) - flat(avg)
        move = flat(new) - (flat(w) - eta * lam * flat(w))  # movement along Delta, beyond the decay term
        assert np.linalg.norm(move) <= eta * np.linalg.norm(delta) * (1 + 1e-12) + 1e-12
        if lam == 0.0:
            assert np.linalg.norm(flat(new) - flat(w)) <= eta * np.linalg.norm(delta) * (1 + 1e-12) + 1e-12
    # f = 0 and lambda = 0: gamma = 0, model unchanged
    w = [np.array([1.0, -2.0])]
    new, info = DFWServerStep(DFWConfig(server_weight_decay=0.0)).step(w, [np.array([0.0, 0.0])], 0.0)
    assert info["gamma"] == 0.0 and np.array_equal(new[0], w[0])


def test_o16_reduction_to_fedavg():
    rng = np.random.default_rng(4)
    w = [rng.standard_normal(6)]
    models = [[rng.standard_normal(6)] for _ in range(3)]
    p = aggregation_weights([5, 10, 20])
    avg = weighted_average(models, p)
    d2 = float(np.sum((w[0] - avg[0]) ** 2))
    new, info = DFWServerStep(DFWConfig(server_eta=1.0, server_weight_decay=0.0)).step(w, avg, d2 + 1e-5 + 0.1)
    assert info["gamma"] == 1.0
    np.testing.assert_allclose(new[0], avg[0], rtol=0, atol=1e-14)


def test_o17_monotonicity():
    r = np.zeros(4)
    d = np.array([1.0, 0.5, -0.3, 0.2])
    fs = np.linspace(0, 3, 40)
    gam = [dfw_gamma(f, d, r, 1.0, 1e-5) for f in fs]
    assert all(b >= a for a, b in zip(gam, gam[1:]))
    scales = np.linspace(0.1, 5, 40)
    gam2 = [dfw_gamma(0.7, s * d, r, 1.0, 1e-5) for s in scales]
    assert all(b <= a for a, b in zip(gam2, gam2[1:]))


def test_o18_momentum_buffer_persists():
    cfg = DFWConfig(server_eta=0.5, server_weight_decay=0.01, server_momentum=0.9)
    step = DFWServerStep(cfg)
    w = [np.array([1.0, 2.0, 3.0])]
    avg = [np.array([0.9, 2.1, 2.8])]
    new1, info1 = step.step(w, avg, 0.05)
    delta, r = w[0] - avg[0], 0.01 * w[0]
    np.testing.assert_allclose(step.momentum_buffer, -0.5 * info1["gamma"] * (delta + r), rtol=1e-14)
    new2, _ = step.step(w, avg, 0.05)
    assert not np.allclose(new1[0], new2[0])
    fresh, _ = DFWServerStep(DFWConfig(server_eta=0.5, server_weight_decay=0.01)).step(w, avg, 0.05)
    np.testing.assert_allclose(new1[0], fresh[0] + 0.9 * step_buffer_after_one(w, avg, 0.05, cfg), rtol=1e-12)


def step_buffer_after_one(w, avg, f, cfg):
    s = DFWServerStep(cfg)
    s.step(w, avg, f)
    return s.momentum_buffer


def test_o19_function_sync():
    assert function_sync([1.0, 3.0], aggregation_weights([1, 3])) == pytest.approx(2.5)
    assert function_sync([1.0, 3.0], aggregation_weights([1, 3], "uniform")) == pytest.approx(2.0)
    with pytest.raises(FloatingPointError, match="non-finite loss"):
        function_sync([1.0, float("nan")], [0.5, 0.5])


def test_dfw_zero_delta_and_non_finite_inputs():
    cfg = DFWConfig()  # paper defaults
    w = [np.array([1.0, -1.0], np.float32)]
    new, info = DFWServerStep(cfg).step(w, [w[0].copy()], 0.3)
    assert np.all(np.isfinite(new[0])) and info["gamma"] == 1.0
    np.testing.assert_allclose(new[0], w[0] * (1 - cfg.server_eta * cfg.server_weight_decay), rtol=1e-6)
    assert new[0].dtype == np.float32
    with pytest.raises(FloatingPointError):
        DFWServerStep(cfg).step(w, [w[0].copy()], float("nan"))
    with pytest.raises(FloatingPointError):
        DFWServerStep(cfg).step(w, [np.array([np.nan, 0.0], np.float32)], 0.3)


def test_dfw_presets_and_validation():
    assert DFW_PRESETS["paper"] == DFWConfig()
    a = DFWConfig.preset("authors_code")
    assert (a.server_eta, a.server_weight_decay, a.server_momentum, a.dfw_eps) == (0.01, 1e-5, 0.9, 1e-5)
    for kw in ({"server_eta": 0.0}, {"server_weight_decay": -1.0}, {"server_momentum": 1.0}, {"dfw_eps": 0.0}):
        with pytest.raises(ValueError, match=list(kw)[0]):
            DFWConfig(**kw)
    with pytest.raises(ValueError, match="unknown DFW preset"):
        DFWConfig.preset("nope")


def test_dfw_integer_arrays_take_average_and_mask():
    w = [np.array([1.0, 2.0]), np.array([4], np.int64)]
    avg = [np.array([0.5, 1.5]), np.array([6], np.int64)]
    new, _ = DFWServerStep(DFWConfig(server_weight_decay=0.0)).step(w, avg, 10.0)
    np.testing.assert_allclose(new[0], avg[0])
    assert new[1].dtype == np.int64 and new[1][0] == 6


# ------------------------------------------------------------------ FedExP
def test_o21_fedexp():
    d = [np.ones(5) * 0.3 for _ in range(4)]
    assert fedexp_step_size(d, 1e-3) == 1.0
    eye = list(np.eye(3))
    assert fedexp_step_size(eye, 1e-3) == pytest.approx(3 / (6 * (1 / 3 + 1e-3)), rel=1e-12)
    assert fedexp_step_size(eye, 1e-3) == pytest.approx(1.495513, abs=1e-6)
    rng = np.random.default_rng(5)
    for _ in range(50):
        assert fedexp_step_size([rng.standard_normal(7) for _ in range(5)], 1e-3) >= 1.0
    w = [np.zeros(3)]
    models = [[-e] for e in eye]  # Delta_i = e_i
    new, info = fedexp_server_step(w, models, 1e-3)
    np.testing.assert_allclose(new[0], -info["eta_g"] * np.ones(3) / 3)


def test_fedexp_zero_and_bad_inputs():
    w = [np.ones(3, np.float32)]
    new, info = fedexp_server_step(w, [[w[0].copy()], [w[0].copy()]], 0.0)
    assert info["eta_g"] == 1.0 and np.array_equal(new[0], w[0])
    with pytest.raises(FloatingPointError):
        fedexp_server_step(w, [[np.array([np.inf, 0, 0], np.float32)]], 1e-3)
    with pytest.raises(ValueError, match="eps"):
        fedexp_step_size([np.ones(2)], -1.0)


# ------------------------------------------------------------------ SCAFFOLD
def _lin_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 3)


def _plain_sgd(model, x, y, batches, lr):
    for idx in batches:
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-lr)


def test_o22_scaffold_zero_controls_equals_fedavg_round_one():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 40, 4, generator=gen)
    y = torch.randint(0, 3, (3, 40), generator=gen)
    batches = [torch.arange(i, i + 8) for i in range(0, 40, 8)]
    g = [p.detach().numpy().copy() for p in _lin_model(1).parameters()]
    sc_models, avg_models, dcs = [], [], []
    for i in range(3):
        m1, m2 = _lin_model(1), _lin_model(1)
        zeros = [torch.zeros_like(p) for p in m1.parameters()]
        stats = scaffold_local_sgd(m1, [(x[i][b], y[i][b]) for b in batches], 0.1, zeros, zeros)
        _plain_sgd(m2, x[i], y[i], batches, 0.1)
        a = [p.detach().numpy().copy() for p in m1.parameters()]
        b = [p.detach().numpy().copy() for p in m2.parameters()]
        assert all(np.array_equal(u, v) for u, v in zip(a, b))
        sc_models.append(a)
        avg_models.append(b)
        c_new, dc = scaffold_client_control_update([np.zeros_like(t) for t in g], [np.zeros_like(t) for t in g], g, a, stats["steps"], 0.1)
        dcs.append(dc)
    new_w, new_c = scaffold_server_update(g, [np.zeros_like(t) for t in g], sc_models, dcs, num_clients=6)
    fedavg = aggregate_inplace([(None, _fitres(m, 40)) for m in avg_models])
    assert all(np.array_equal(u, v) for u, v in zip(new_w, fedavg))
    # c <- 0 + (S/N) * mean(dc)
    for j in range(len(g)):
        np.testing.assert_allclose(new_c[j], 0.5 * np.mean([dc[j] for dc in dcs], axis=0), rtol=1e-6, atol=1e-7)


def test_scaffold_control_equals_mean_gradient_along_path():
    # option II control = average gradient over the K local steps (when c = c_i = 0)
    w0 = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
    a = torch.tensor([3.0, 0.5], dtype=torch.float64)
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(w0.detach().clone())
    grads = []
    lr, K = 0.1, 6
    with torch.no_grad():
        w = w0.detach().clone()
        for _ in range(K):
            grads.append((a * w).clone())
            w -= lr * a * w
    start = [w0.detach().numpy().copy()]
    c_new, dc = scaffold_client_control_update([np.zeros(2)], [np.zeros(2)], start, [w.numpy()], K, lr)
    np.testing.assert_allclose(c_new[0], torch.stack(grads).mean(0).numpy(), rtol=1e-12)
    np.testing.assert_allclose(dc[0], c_new[0])


def test_scaffold_correction_shifts_gradient():
    # with c - c_i = v, one SGD step moves by -lr*(g + v)
    m1, m2 = _lin_model(3), _lin_model(3)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    v = [torch.full_like(p, 0.25) for p in m1.parameters()]
    zeros = [torch.zeros_like(p) for p in m1.parameters()]
    scaffold_local_sgd(m1, [(x, y)], 0.1, v, zeros)
    _plain_sgd(m2, x, y, [torch.arange(8)], 0.1)
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2 - 0.1 * 0.25)


def test_scaffold_server_eta_and_validation():
    g = [np.zeros(2)]
    models = [[np.array([1.0, 1.0])], [np.array([3.0, -1.0])]]
    new_w, _ = scaffold_server_update(g, [np.zeros(2)], models, [[np.zeros(2)]] * 2, 10, eta_g=0.5)
    np.testing.assert_allclose(new_w[0], [1.0, 0.0])
    with pytest.raises(ValueError, match="num_clients"):
        scaffold_server_update(g, [np.zeros(2)], models, [[np.zeros(2)]] * 2, 1)
    with pytest.raises(FloatingPointError):
        scaffold_server_update(g, [np.zeros(2)], [[np.array([np.nan, 0])]], [[np.zeros(2)]], 5)


def test_aggregate_delta_sign():
    d = aggregate_delta([np.array([1.0])], [np.array([0.25])])
    assert d[0][0] == 0.75


def test_scaffold_control_step_streams_bit_identically_to_the_stacked_mean():
    """The streaming control step adds the updates in client order into a float64 accumulator: the
    same numbers as ``c + (S/N) np.mean(np.stack(dc), axis=0)`` and the weighted ``c + sum_i (n_i/n) dc_i``."""
    rng = np.random.default_rng(3)
    shapes = [(16, 3, 3, 3), (16,), (10, 50)]
    g = [rng.standard_normal(sh).astype(np.float32) for sh in shapes]
    c = [rng.standard_normal(sh).astype(np.float32) for sh in shapes]
    models = [[rng.standard_normal(sh).astype(np.float32) for sh in shapes] for _ in range(7)]
    dcs = [[rng.standard_normal(sh).astype(np.float32) for sh in shapes] for _ in range(7)]
    counts = [int(n) for n in rng.integers(1, 50, size=7)]
    _, uniform = scaffold_server_update(g, c, models, dcs, num_clients=20)
    _, weighted = scaffold_server_update(g, c, models, dcs, 20, num_examples=counts, total_examples=sum(counts) + 9)
    for j, cj in enumerate(c):
        stacked = np.mean(np.stack([np.asarray(dc[j], np.float64) for dc in dcs]), axis=0)
        expect = (cj.astype(np.float64) + (7 / 20.0) * stacked).astype(np.float32)
        assert uniform[j].dtype == np.float32 and np.array_equal(uniform[j], expect)
        terms = sum((n / float(sum(counts) + 9)) * np.asarray(dc[j], np.float64) for n, dc in zip(counts, dcs))
        assert np.array_equal(weighted[j], (cj.astype(np.float64) + terms).astype(np.float32))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("counts", [None, [0, 4, 2]])  # client 0 weighs 0: 0 x inf is NaN, still caught
def test_scaffold_names_the_first_non_finite_reply(bad, counts):
    """SCAFFOLD checks its two sums for finiteness and searches the replies only when one is not finite:
    a NaN or an infinity anywhere in any model or control update is still refused, naming the first."""
    shapes = [(3, 2), (4,)]
    rng = np.random.default_rng(0)
    for client, which, j in itertools.product(range(3), ("model", "control update"), range(2)):
        models = [[rng.standard_normal(sh).astype(np.float32) for sh in shapes] for _ in range(3)]
        dcs = [[rng.standard_normal(sh).astype(np.float32) for sh in shapes] for _ in range(3)]
        (models if which == "model" else dcs)[client][j].flat[1] = bad
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no NumPy warning before the refusal
            with pytest.raises(FloatingPointError, match=f"client {client} {which} array {j} is not finite"):
                scaffold_server_update([np.zeros(sh, np.float32) for sh in shapes],
                                       [np.zeros(sh, np.float32) for sh in shapes], models, dcs, 6,
                                       num_examples=counts, total_examples=None if counts is None else 9)
