"""Server cores of spec 001: FedLi-LS / FedLi-LU / FedExP / SCAFFOLD (O7, O8, O20 through the cores,
the framework's reply validation, the official-code options and the
constructors of both Flower APIs)."""

import os

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
from flwr.server.strategy.aggregate import aggregate_inplace

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

from flwr_strategies.core import Reply, ReplyError  # noqa: E402
from flwr_strategies.fedli import (  # noqa: E402
    ArmijoConfig,
    DFWConfig,
    FedExPConfig,
    FedExPServer,
    FedLiLSConfig,
    FedLiLSServer,
    FedLiLUConfig,
    FedLiLUServer,
    ScaffoldConfig,
    ScaffoldServer,
)
from flwr_strategies.fedli import serverapp, strategy  # noqa: E402


def _arrays(rng):
    return [rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]


@pytest.fixture
def setup():
    rng = np.random.default_rng(0)
    init = _arrays(rng)
    clients = [_arrays(rng) for _ in range(4)]
    ns = [30, 7, 55, 12]
    return init, clients, ns


def _round(core, replies, rnd=1, policy="drop"):
    return core.train_round(rnd, replies, sampled=[r.partition_id for r in replies], on_bad_reply=policy)


def _flat(arrays):
    return np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays])


def test_o7_fedli_ls_unit_equals_flower_fedavg_bitwise(setup):
    init, clients, ns = setup
    replies = [Reply(i, c, n, {"step_size": 0.1 * (i + 1), "train_loss": 1.0}) for i, (c, n) in enumerate(zip(clients, ns))]
    core = FedLiLSServer(init, num_partitions=4)
    m = _round(core, replies)
    fitres = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(c), n, {})) for c, n in zip(clients, ns)]
    flower = aggregate_inplace(fitres)
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(core.global_arrays(), flower))
    assert m["eta_g"] == 1.0 and m["rejected"] == 0


def test_o8_fedli_ls_max_mode_and_uniform(setup):
    init, clients, ns = setup
    replies = [Reply(i, c, n, {"step_size": 0.1 * (i + 1)}) for i, (c, n) in enumerate(zip(clients, ns))]
    core = FedLiLSServer(init, config=FedLiLSConfig(step_size_sync="max", weighting="uniform"))
    m = _round(core, replies)
    assert m["eta_g"] == pytest.approx(0.4)
    avg = [np.mean([c[j].astype(np.float64) for c in clients], axis=0) for j in range(2)]
    for new, w, a in zip(core.global_arrays(), init, avg):
        np.testing.assert_allclose(new, w - 0.4 * (w - a), rtol=1e-5, atol=1e-6)


def test_o20_missing_scalar_is_rejected_with_a_clear_error(setup):
    init, clients, _ = setup
    with pytest.raises(ReplyError, match="step_size"):
        _round(FedLiLSServer(init), [Reply(3, clients[0], 5, {"train_loss": 1.0})], policy="raise")
    with pytest.raises(ReplyError, match="train_loss"):
        _round(FedLiLUServer(init), [Reply(3, clients[0], 5, {"step_size": 1.0})], policy="raise")


def test_nonfinite_reports_raise_or_are_dropped_with_state_unchanged(setup):
    """A NaN report raises (on_bad_reply="raise") or is dropped with the state unchanged."""
    init, clients, _ = setup
    bad = [Reply(0, clients[0], 10, {"step_size": float("nan")}), Reply(1, clients[1], 10, {"step_size": 0.5})]
    core = FedLiLSServer(init)
    before = core.state_dict()
    with pytest.raises(ReplyError, match="partition 0"):
        _round(core, bad, policy="raise")
    assert all(np.array_equal(a, b) for a, b in zip(core.state_dict()["method"]["current"], before["method"]["current"]))
    m = _round(core, bad)
    assert m["rejected"] == 1 and m["failures"] == 1
    assert all(np.array_equal(a, b) for a, b in zip(core.global_arrays(), clients[1]))
    lu = FedLiLUServer(init)
    nan_model = [np.full_like(a, np.nan) for a in clients[2]]
    m = _round(lu, [Reply(2, nan_model, 10, {"train_loss": 0.3})])
    assert m["rejected"] == 1 and all(np.array_equal(a, b) for a, b in zip(lu.global_arrays(), init))


def test_bad_reply_policy_has_one_name(setup):
    init, _, _ = setup
    assert strategy.FedLiLS(initial_parameters=init, on_bad_reply="raise").on_bad_reply == "raise"
    assert strategy.FedLiLU(initial_parameters=init).on_bad_reply == "drop"
    with pytest.raises(TypeError, match="unexpected keyword argument 'on_nonfinite'"):
        strategy.FedExP(initial_parameters=init, on_nonfinite="raise")


def test_all_zero_delta_keeps_finite_model(setup):
    init, _, _ = setup
    same = [Reply(i, [a.copy() for a in init], 10, {"step_size": 0.5, "train_loss": 0.2}) for i in range(3)]
    for core in (FedLiLSServer(init, config=FedLiLSConfig(step_size_sync="max")), FedLiLUServer(init), FedExPServer(init)):
        _round(core, same)
        new = core.global_arrays()
        assert all(np.all(np.isfinite(a)) for a in new)
        if not isinstance(core, FedLiLUServer):  # up to the rounding of the float32 average
            for a, b in zip(new, init):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        else:  # documented: Delta = 0 reduces to the weight-decay step w - eta*lambda*w
            for a, b in zip(new, init):
                np.testing.assert_allclose(a, b * (1 - 1e-3), rtol=1e-6)


def test_fedli_lu_core_matches_closed_form_keeps_momentum_and_reports_ratio(setup):
    init, clients, ns = setup
    replies = [Reply(i, c, n, {"train_loss": 0.5 + i}) for i, (c, n) in enumerate(zip(clients, ns))]
    cfg = DFWConfig(server_eta=0.5, server_weight_decay=1e-2, server_momentum=0.9)
    core = FedLiLUServer(init, config=FedLiLUConfig(dfw=cfg))
    m = _round(core, replies)
    p = np.array(ns) / sum(ns)
    f = float(np.dot(p, [0.5 + i for i in range(4)]))
    w = _flat(init)
    avg = sum(pi * _flat(c) for pi, c in zip(p, clients))
    d, r = w - avg, 1e-2 * w
    raw = (f - 0.5 * d @ r) / (0.5 * d @ d + 1e-5)
    gamma = min(1.0, max(0.0, raw))
    assert m["gamma"] == pytest.approx(gamma, rel=1e-5) and m["train_loss"] == pytest.approx(f)
    assert m["gamma_raw"] == pytest.approx(raw, rel=1e-5)
    assert m["polyak_ratio"] == pytest.approx(f / (0.5 * d @ d + 1e-5), rel=1e-5)
    expected = w - 0.5 * (r + gamma * d) + 0.9 * (-0.5 * gamma * (d + r))
    np.testing.assert_allclose(_flat(core.global_arrays()), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(core.momentum, -0.5 * gamma * (d + r), rtol=1e-5, atol=1e-7)


def test_fedexp_core_uniform_mean_and_paper_formula(setup):
    init, clients, ns = setup
    core = FedExPServer(init, config=FedExPConfig(eps=1e-3))
    m = _round(core, [Reply(i, c, n, {}) for i, (c, n) in enumerate(zip(clients, ns))])
    w = _flat(init)
    ds = [w - _flat(c) for c in clients]
    dbar = np.mean(ds, axis=0)
    eta = max(1.0, sum(x @ x for x in ds) / (2 * 4 * (dbar @ dbar + 1e-3)))
    assert m["eta_g"] == pytest.approx(eta, rel=1e-9)
    np.testing.assert_allclose(_flat(core.global_arrays()), w - eta * dbar, rtol=1e-5, atol=1e-6)


def test_scaffold_core_wire_format_and_no_per_client_table(setup):
    init, clients, _ = setup
    core = ScaffoldServer(init, num_partitions=8)
    ins = core.configure_train(1, [0, 1])
    assert len(ins[0].arrays) == 4 and ins[0].model_layout is False and ins[0].arrays is ins[1].arrays
    dcs = [[np.full_like(a, float(i + 1)) for a in init] for i in range(2)]
    m = _round(core, [Reply(i, clients[i] + dcs[i], 10, {}) for i in range(2)])
    for j in range(2):
        np.testing.assert_allclose(core.global_arrays()[j], (clients[0][j].astype(np.float64) + clients[1][j]) / 2, rtol=1e-6)
        np.testing.assert_allclose(core.c_global[j], 2 / 8 * 1.5)
    assert m["control_norm"] > 0
    state = core.state_dict()["method"]
    assert set(state) == {"current", "c_global"} and core.client_controls == {}
    m = _round(core, [Reply(0, clients[0], 10, {})], rnd=2)  # weights only: wrong array count
    assert m["rejected"] == 1


def test_scaffold_server_held_controls_mirror_the_clients(setup):
    init, clients, _ = setup
    core = ScaffoldServer(init, num_partitions=4, config=ScaffoldConfig(control_state="server"))
    dc = [np.full_like(a, 0.25) for a in init]
    _round(core, [Reply(1, clients[1] + dc, 10, {})])
    ins = core.configure_train(2, [1, 2])
    assert len(ins[0].arrays) == 6
    assert all(np.array_equal(a, b) for a, b in zip(ins[0].arrays[4:], dc))
    assert all(not a.any() for a in ins[1].arrays[4:])


def test_scaffold_code_weighting_by_examples(setup):
    init, clients, ns = setup
    core = ScaffoldServer(init, num_partitions=4, config=ScaffoldConfig.code(total_examples=200))
    dcs = [[np.full_like(a, float(i + 1)) for a in init] for i in range(2)]
    _round(core, [Reply(i, clients[i] + dcs[i], ns[i], {}) for i in range(2)])
    p = np.array(ns[:2]) / sum(ns[:2])
    np.testing.assert_allclose(_flat(core.global_arrays()), p[0] * _flat(clients[0]) + p[1] * _flat(clients[1]), rtol=1e-6)
    np.testing.assert_allclose(core.c_global[0], (30 * 1 + 7 * 2) / 200, rtol=1e-6)
    with pytest.raises(ValueError, match="total_examples"):
        ScaffoldConfig(weighting="num_examples")


@pytest.mark.parametrize("api", [strategy, serverapp])
def test_both_apis_construct_with_flower_vocabulary(setup, api):
    init, _, _ = setup
    kw = {"initial_parameters": init, "fraction_fit": 0.5} if api is strategy else {"fraction_train": 0.5}
    a = api.FedLiLS(step_size_sync="max", armijo=ArmijoConfig(armijo_c=0.2), **kw)
    assert a.config.armijo.armijo_c == 0.2 and a.config.step_size_sync == "max"
    # a preset is its fields, as keyword arguments (the one way hyperparameters arrive)
    assert api.FedLiLU(**vars(FedLiLUConfig.code()), **kw).config.dfw.server_momentum == 0.9
    assert api.FedExP(**vars(FedExPConfig.code()), **kw).config.eps_scaling == "clients"
    assert api.Scaffold(server_lr=0.5, **kw).config.server_lr == 0.5
    with pytest.raises(TypeError, match="FedExP.* unexpected keyword argument 'config'"):
        api.FedExP(eps=0.1, config=FedExPConfig(), **kw)


def test_legacy_constructors_validate(setup):
    init, _, _ = setup
    with pytest.raises(ValueError, match="step_size_sync"):
        strategy.FedLiLS(step_size_sync="mean", initial_parameters=init)
    with pytest.raises(ValueError, match="weighting"):
        strategy.FedLiLS(weighting="median", initial_parameters=init)
    with pytest.raises(ValueError, match="loss_report"):
        strategy.FedLiLU(loss_report="last", initial_parameters=init)
    with pytest.raises(ValueError, match="eps"):
        strategy.FedExP(eps=-1.0, initial_parameters=init)
    # SCAFFOLD's N is the number of clients that connect: its core is built in round 1
    assert strategy.Scaffold(initial_parameters=init).build_core(init, 3).num_partitions == 3


def test_method_registrations_variants_and_params():
    from flwr_strategies.registry import get_method, list_methods, resolve_params

    def config(name, params):  # the config the command line builds from the class (Class(k=v))
        return get_method(name).configs(params)["config"]

    assert {"fedli-ls", "fedli-lu", "fedexp", "scaffold"} <= set(list_methods())
    lu = resolve_params(get_method("fedli-lu"), {})
    assert config("fedli-lu", lu).dfw == DFWConfig()  # paper-faithful default
    code = config("fedli-lu", resolve_params(get_method("fedli-lu"), {"variant": "code"})).dfw
    assert (code.server_eta, code.server_weight_decay, code.server_momentum) == (0.01, 1e-5, 0.9)
    mixed = config("fedli-lu", resolve_params(get_method("fedli-lu"), {"variant": "code", "server_eta": "0.5"})).dfw
    assert mixed.server_eta == 0.5 and mixed.server_momentum == 0.9
    with pytest.raises(ValueError, match="variant"):
        config("fedli-lu", {**lu, "variant": "nope"})
    ls = config("fedli-ls", resolve_params(get_method("fedli-ls"), {"armijo_c": "0.2", "reset_option": "1"}))
    assert ls.armijo.armijo_c == 0.2 and ls.armijo.reset_option == 1
    assert config("fedli-ls", resolve_params(get_method("fedli-ls"), {"variant": "code"})).armijo == ArmijoConfig.code()
    assert config("fedexp", resolve_params(get_method("fedexp"), {"variant": "code"})) == FedExPConfig.code()
    for name in ("fedli-ls", "fedli-lu", "fedexp", "scaffold"):
        batch, source = get_method(name).train_defaults["batch_size"]
        assert batch == 32 and source.startswith("paper: FedLi Sec. 7")
        fraction, _ = get_method(name).train_defaults["fraction_fit"]
        assert fraction["*"][0] == 0.1 and fraction["*"][1].startswith("paper: FedLi Sec. 7")  # digits: reduced, all 10
