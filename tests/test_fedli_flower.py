"""Flower adapters of spec 001: FedLi-LS / FedLi-LU / FedExP / SCAFFOLD strategies and clients
(O7, O8, O20 through the strategies, bad-input handling, and short end-to-end runs that must learn)."""

import os

import numpy as np
import pytest
import torch
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.strategy import FedAvg

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
torch.set_num_threads(1)

from flwr_strategies.fedli import DFWConfig  # noqa: E402
from flwr_strategies.fedli.strategy_fedexp import FedExP  # noqa: E402
from flwr_strategies.fedli.strategy_ls import FedLiLS  # noqa: E402
from flwr_strategies.fedli.strategy_lu import FedLiLU  # noqa: E402
from flwr_strategies.fedli.strategy_scaffold import Scaffold  # noqa: E402


def _arrays(rng):
    return [rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]


def _res(arrays, n, pid, **metrics):
    return (None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), n, {"partition-id": pid, **metrics}))


@pytest.fixture
def setup():
    rng = np.random.default_rng(0)
    init = _arrays(rng)
    clients = [_arrays(rng) for _ in range(4)]
    ns = [30, 7, 55, 12]
    return init, clients, ns


def _nd(params):
    return parameters_to_ndarrays(params)


def test_o7_fedli_ls_unit_equals_flower_fedavg_bitwise(setup):
    init, clients, ns = setup
    results = [_res(c, n, i, step_size=0.1 * (i + 1), train_loss=1.0) for i, (c, n) in enumerate(zip(clients, ns))]
    ls = FedLiLS(initial_parameters=ndarrays_to_parameters(init))
    fa = FedAvg(initial_parameters=ndarrays_to_parameters(init))
    p_ls, m = ls.aggregate_fit(1, results, [])
    p_fa, _ = fa.aggregate_fit(1, results, [])
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(_nd(p_ls), _nd(p_fa)))
    assert m["eta_g"] == 1.0
    assert all(np.array_equal(a, b) for a, b in zip(ls.current, _nd(p_ls)))


def test_o8_fedli_ls_max_mode_and_uniform(setup):
    init, clients, ns = setup
    results = [_res(c, n, i, step_size=0.1 * (i + 1)) for i, (c, n) in enumerate(zip(clients, ns))]
    ls = FedLiLS(step_size_sync="max", weighting="uniform", initial_parameters=ndarrays_to_parameters(init))
    params, m = ls.aggregate_fit(1, results, [])
    assert m["eta_g"] == pytest.approx(0.4)
    avg = [np.mean([c[j].astype(np.float64) for c in clients], axis=0) for j in range(2)]
    for new, w, a in zip(_nd(params), init, avg):
        np.testing.assert_allclose(new, w - 0.4 * (w - a), rtol=1e-5, atol=1e-6)


def test_o20_missing_scalar_is_a_clear_error(setup):
    init, clients, ns = setup
    ls = FedLiLS(initial_parameters=ndarrays_to_parameters(init))
    with pytest.raises(KeyError, match="step_size"):
        ls.aggregate_fit(1, [_res(clients[0], 5, 3, train_loss=1.0)], [])
    lu = FedLiLU(initial_parameters=ndarrays_to_parameters(init))
    with pytest.raises(KeyError, match="train_loss"):
        lu.aggregate_fit(1, [_res(clients[0], 5, 3, step_size=1.0)], [])


def test_nonfinite_reports_raise_or_are_dropped(setup):
    init, clients, ns = setup
    bad = [_res(clients[0], 10, 0, step_size=float("nan")), _res(clients[1], 10, 1, step_size=0.5)]
    with pytest.raises(FloatingPointError, match="partition 0"):
        FedLiLS(initial_parameters=ndarrays_to_parameters(init)).aggregate_fit(1, bad, [])
    ls = FedLiLS(on_nonfinite="drop", initial_parameters=ndarrays_to_parameters(init))
    params, m = ls.aggregate_fit(1, bad, [])
    assert m["dropped_nonfinite"] == 1
    assert all(np.array_equal(a, b) for a, b in zip(_nd(params), clients[1]))
    nan_model = [np.full_like(a, np.nan) for a in clients[2]]
    lu = FedLiLU(on_nonfinite="drop", initial_parameters=ndarrays_to_parameters(init))
    params, m = lu.aggregate_fit(1, [_res(nan_model, 10, 2, train_loss=0.3)], [])
    assert params is None and m["dropped_nonfinite"] == 1  # nothing left: the model is kept
    assert all(np.array_equal(a, b) for a, b in zip(lu.current, init))
    with pytest.raises(FloatingPointError):
        FedLiLU(initial_parameters=ndarrays_to_parameters(init)).aggregate_fit(1, [_res(clients[0], 3, 0, train_loss=float("inf"))], [])


def test_all_zero_delta_keeps_finite_model(setup):
    init, _, _ = setup
    same = [_res([a.copy() for a in init], 10, i, step_size=0.5, train_loss=0.2) for i in range(3)]
    for strat in (
        FedLiLS(step_size_sync="max", initial_parameters=ndarrays_to_parameters(init)),
        FedLiLU(initial_parameters=ndarrays_to_parameters(init)),
        FedExP(initial_parameters=ndarrays_to_parameters(init)),
    ):
        params, m = strat.aggregate_fit(1, same, [])
        new = _nd(params)
        assert all(np.all(np.isfinite(a)) for a in new)
        if not isinstance(strat, FedLiLU):  # up to the rounding of the float32 weighted average
            for a, b in zip(new, init):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        else:  # documented: Delta = 0 reduces to the weight-decay step w - eta*lambda*w
            for a, b in zip(new, init):
                np.testing.assert_allclose(a, b * (1 - 1e-3), rtol=1e-6)


def test_fedli_lu_strategy_matches_closed_form_and_keeps_momentum(setup):
    init, clients, ns = setup
    results = [_res(c, n, i, train_loss=0.5 + i) for i, (c, n) in enumerate(zip(clients, ns))]
    cfg = DFWConfig(server_eta=0.5, server_weight_decay=1e-2, server_momentum=0.9)
    lu = FedLiLU(dfw=cfg, initial_parameters=ndarrays_to_parameters(init))
    params, m = lu.aggregate_fit(1, results, [])
    p = np.array(ns) / sum(ns)
    f = float(np.dot(p, [0.5 + i for i in range(4)]))
    w = np.concatenate([a.ravel().astype(np.float64) for a in init])
    avg = sum(pi * np.concatenate([a.ravel().astype(np.float64) for a in c]) for pi, c in zip(p, clients))
    d, r = w - avg, 1e-2 * w
    gamma = min(1.0, max(0.0, (f - 0.5 * d @ r) / (0.5 * d @ d + 1e-5)))
    assert m["gamma"] == pytest.approx(gamma, rel=1e-5) and m["train_loss"] == pytest.approx(f)
    expected = w - 0.5 * (r + gamma * d) + 0.9 * (-0.5 * gamma * (d + r))
    np.testing.assert_allclose(np.concatenate([a.ravel() for a in _nd(params)]), expected, rtol=1e-5, atol=1e-6)
    assert lu.dfw.momentum_buffer is not None


def test_fedexp_strategy_uses_uniform_mean(setup):
    init, clients, ns = setup
    results = [_res(c, n, i) for i, (c, n) in enumerate(zip(clients, ns))]
    strat = FedExP(eps=1e-3, initial_parameters=ndarrays_to_parameters(init))
    params, m = strat.aggregate_fit(1, results, [])
    w = np.concatenate([a.ravel().astype(np.float64) for a in init])
    ds = [w - np.concatenate([a.ravel().astype(np.float64) for a in c]) for c in clients]
    dbar = np.mean(ds, axis=0)
    eta = max(1.0, sum(x @ x for x in ds) / (2 * 4 * (dbar @ dbar + 1e-3)))
    assert m["eta_g"] == pytest.approx(eta, rel=1e-9)
    np.testing.assert_allclose(np.concatenate([a.ravel() for a in _nd(params)]), w - eta * dbar, rtol=1e-5, atol=1e-6)


def test_scaffold_strategy_wire_format(setup):
    init, clients, _ = setup
    s = Scaffold(num_clients=8, initial_parameters=ndarrays_to_parameters(init))
    dcs = [[np.full_like(a, float(i + 1)) for a in init] for i in range(2)]
    results = [_res(clients[i] + dcs[i], 10, i) for i in range(2)]
    params, m = s.aggregate_fit(1, results, [])
    for j in range(2):
        np.testing.assert_allclose(_nd(params)[j], (clients[0][j].astype(np.float64) + clients[1][j]) / 2, rtol=1e-6)
        np.testing.assert_allclose(s.c_global[j], 2 / 8 * 1.5)
    assert s.participation == {0: 1, 1: 1}
    with pytest.raises(ValueError, match="weights"):
        s.aggregate_fit(2, [_res(clients[0], 10, 0)], [])


def test_strategy_constructor_validation(setup):
    init, _, _ = setup
    ip = ndarrays_to_parameters(init)
    with pytest.raises(ValueError, match="step_size_sync"):
        FedLiLS(step_size_sync="mean", initial_parameters=ip)
    with pytest.raises(ValueError, match="weighting"):
        FedLiLS(weighting="median", initial_parameters=ip)
    with pytest.raises(ValueError, match="loss_report"):
        FedLiLU(loss_report="last", initial_parameters=ip)
    with pytest.raises(ValueError, match="initial_parameters"):
        FedLiLU()
    with pytest.raises(ValueError, match="eps"):
        FedExP(eps=-1.0, initial_parameters=ip)
    with pytest.raises(ValueError, match="num_clients"):
        Scaffold(num_clients=0, initial_parameters=ip)


def test_method_registrations_and_dfw_presets():
    from flwr_strategies.fedli.methods import dfw_config_from_params
    from flwr_strategies.registry import get_method, list_methods, resolve_params

    names = set(list_methods())
    assert {"fedli-ls", "fedli-lu", "fedexp", "scaffold"} <= names
    lu = resolve_params(get_method("fedli-lu"), {})
    assert dfw_config_from_params(lu) == DFWConfig()  # paper-faithful default
    code = dfw_config_from_params(resolve_params(get_method("fedli-lu"), {"dfw_preset": "authors_code"}))
    assert (code.server_eta, code.server_weight_decay, code.server_momentum) == (0.01, 1e-5, 0.9)
    mixed = dfw_config_from_params(resolve_params(get_method("fedli-lu"), {"dfw_preset": "authors_code", "server_eta": "0.5"}))
    assert mixed.server_eta == 0.5 and mixed.server_momentum == 0.9
    with pytest.raises(ValueError, match="dfw_preset"):
        dfw_config_from_params({**lu, "dfw_preset": "nope"})
    ls = resolve_params(get_method("fedli-ls"), {"armijo_c": "0.2", "reset_option": "1"})
    assert ls["armijo_c"] == 0.2 and ls["reset_option"] == 1
