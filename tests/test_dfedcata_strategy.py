"""DFedCata / DFedAvg / D-PSGD Flower strategies against the reference simulator (oracles 1, 11, 22)."""

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
import pytest
import torch
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

from flwr_strategies.decentralized import Topology, mix, mixing_matrix
from flwr_strategies.dfedcata.local import local_update
from flwr_strategies.dfedcata.reference import simulate
from flwr_strategies.dfedcata.strategy import DFedAvg, DFedCata, DPSGD

M, D = 8, 6
RNG = np.random.default_rng(1)
C = RNG.standard_normal((M, D))
X0 = RNG.standard_normal(D)


class P:
    def __init__(self, pid):
        self.cid, self.pid = str(pid), pid


PROXIES = {i: P(i) for i in range(M)}


def _make(cls, **kw):
    return cls(
        num_clients=M,
        initial_parameters=[X0.reshape(2, 3).astype(np.float64)],
        topology=Topology("random", M, seed=4, neighbours=4),
        partition_resolver=lambda cm: PROXIES,
        on_fit_config_fn=lambda r: {"lr": 0.1 * 0.998 ** (r - 1)},
        dtype=np.float64,
        **kw,
    )


def _drive(strategy, rounds, client, order=None, skip=lambda r, pid: False):
    sent = []
    for r in range(1, rounds + 1):
        ins = strategy.configure_fit(r, None, None)
        sent.append(np.stack([parameters_to_ndarrays(fi.parameters)[0].ravel() for _, fi in ins]))
        res = []
        for proxy, fi in ins:
            if skip(r, proxy.pid):
                continue
            x = parameters_to_ndarrays(fi.parameters)[0]
            y = client(proxy.pid, r, x, fi.config)
            res.append((proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([y]), 1, {"partition-id": proxy.pid})))
        if order is not None:
            res = [res[i] for i in order(len(res))]
        strategy.aggregate_fit(r, res, [])
    return sent


def quad_client(pid, r, x, cfg, K=3):
    lam, eta = cfg.get("lam", 0.0), cfg["lr"]
    x0 = x.ravel()
    xs = (C[pid] + lam * x0) / (1 + lam)
    return (xs + (1 - eta * (1 + lam)) ** K * (x0 - xs)).reshape(x.shape)


@pytest.mark.parametrize("anchor", ["prev_mixed", "prev_local"])
def test_strategy_matches_reference_simulator(anchor):
    beta, lam = 0.9, 0.05
    s = _make(DFedCata, beta=beta, lam=lam, lr=0.1, extrapolation_anchor=anchor)
    _drive(s, 5, quad_client)
    W = lambda t: mixing_matrix(Topology("random", M, seed=4, neighbours=4).graph(t), allow_disconnected=True)  # noqa: E731

    def loc(i, t, x0):
        return quad_client(i, t + 1, x0, {"lam": lam, "lr": 0.1 * 0.998**t})

    ref = simulate(np.tile(X0, (M, 1)), loc, W, 5, beta=beta, anchor=anchor)
    np.testing.assert_allclose(s.models.data, ref, atol=1e-12)


def test_results_order_does_not_matter():
    # oracle 22: synchronous semantics
    a = _make(DFedCata, beta=0.9, lam=0.05)
    b = _make(DFedCata, beta=0.9, lam=0.05)
    _drive(a, 3, quad_client)
    _drive(b, 3, quad_client, order=lambda n: np.random.default_rng(5).permutation(n))
    np.testing.assert_array_equal(a.models.data, b.models.data)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _torch_setup():
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(20, 4, generator=g), torch.randint(0, 3, (20,), generator=g)) for _ in range(M)]
    torch.manual_seed(0)
    init = [p.detach().numpy().copy() for p in Net().state_dict().values()]
    return data, init


def _torch_client(data, rule):
    def client(pid, r, arrays, cfg):
        net = Net()
        sd = net.state_dict()
        net.load_state_dict({k: torch.tensor(a) for k, a in zip(sd, arrays)})
        local_update(net, *data[pid], lr=cfg["lr"], batch_size=8, steps=3, lam=cfg.get("lam", 0.0),
                     generator=torch.Generator().manual_seed(1000 * r + pid), **rule)
        return [v.detach().numpy().copy() for v in net.state_dict().values()]

    return client


def _drive_arrays(strategy, rounds, client, skip=lambda r, pid: False):
    for r in range(1, rounds + 1):
        ins = strategy.configure_fit(r, None, None)
        res = []
        for proxy, fi in ins:
            if skip(r, proxy.pid):
                continue
            y = client(proxy.pid, r, parameters_to_ndarrays(fi.parameters), fi.config)
            res.append((proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(y), 1, {"partition-id": proxy.pid})))
        strategy.aggregate_fit(r, res, [])


def _make_t(cls, init, **kw):
    return cls(num_clients=M, initial_parameters=init, topology=Topology("random", M, seed=4, neighbours=4),
               partition_resolver=lambda cm: PROXIES, on_fit_config_fn=lambda r: {"lr": 0.1}, **kw)


def test_beta0_lambda0_equals_dfedavg_exactly():
    # oracle 1 with a real torch model and minibatches
    data, init = _torch_setup()
    a = _make_t(DFedCata, init, beta=0.0, lam=0.0)
    b = _make_t(DFedAvg, init)
    _drive_arrays(a, 4, _torch_client(data, {}))
    _drive_arrays(b, 4, _torch_client(data, {}))
    np.testing.assert_array_equal(a.models.data, b.models.data)
    c = _make_t(DFedCata, init, beta=0.5, lam=0.0)
    _drive_arrays(c, 4, _torch_client(data, {}))
    assert not np.array_equal(c.models.data, b.models.data)


def test_anchor_is_the_extrapolated_point():
    # oracles 11 and 20: round 0 sends x^0; later rounds send x + beta (x - x_prev) (= prox anchor)
    s = _make(DFedCata, beta=0.8, lam=0.05)
    sent = _drive(s, 3, quad_client)
    np.testing.assert_array_equal(sent[0], np.tile(X0, (M, 1)))
    twin = _make(DFedCata, beta=0.8, lam=0.05)
    _drive(twin, 2, quad_client)
    Xp, X = twin.prev.copy(), twin.models.data.copy()
    np.testing.assert_allclose(sent[2], X + 0.8 * (X - Xp), atol=1e-12)
    assert not np.allclose(sent[2], X)


def test_failed_client_skips_round_in_dfedcata():
    s = _make(DFedCata, beta=0.9, lam=0.05)
    _drive(s, 2, quad_client)
    X, Xp = s.models.data.copy(), s.prev.copy()
    _drive(s, 1, quad_client, skip=lambda r, pid: pid == 2)
    np.testing.assert_array_equal(s.models.data[2], X[2])
    np.testing.assert_array_equal(s.prev[2], Xp[2])
    assert np.isfinite(s.models.data).all()


def test_dpsgd_combines_old_models_plus_local_step():
    s = _make(DPSGD)
    X = np.tile(X0, (M, 1))
    _drive(s, 1, lambda pid, r, x, cfg: x - 0.1 * (x - C[pid].reshape(x.shape)))
    W = mixing_matrix(Topology("random", M, seed=4, neighbours=4).graph(0), allow_disconnected=True)
    np.testing.assert_allclose(s.models.data, mix(W, X) - 0.1 * (X - C), atol=1e-12)


def test_constructor_validation():
    with pytest.raises(ValueError, match="beta"):
        _make(DFedCata, beta=1.0)
    with pytest.raises(ValueError, match="lam"):
        _make(DFedCata, lam=-1.0)
    with pytest.raises(ValueError, match="lr \\* lam"):
        _make(DFedCata, lam=20.0, lr=0.1)


@pytest.mark.parametrize("anchor", ["prev_mixed", "prev_local"])
def test_sequential_inplace_matches_reference(anchor):
    # one Flower round per client: m * T Flower rounds = T algorithm rounds
    beta, lam, T = 0.8, 0.05, 3
    s = _make(DFedCata, beta=beta, lam=lam, extrapolation_anchor=anchor, sequential_inplace=True)
    seen = []

    def client(pid, r, x, cfg):
        seen.append((cfg["flower_round"], pid))
        return quad_client(pid, r, x, cfg)

    for r in range(1, M * T + 1):
        ins = s.configure_fit(r, None, None)
        assert len(ins) == 1
        proxy, fi = ins[0]
        y = client(proxy.pid, r, parameters_to_ndarrays(fi.parameters)[0], fi.config)
        s.aggregate_fit(r, [(proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([y]), 1, {"partition-id": proxy.pid}))], [])
    assert [p for _, p in seen] == list(range(M)) * T
    W = lambda t: mixing_matrix(Topology("random", M, seed=4, neighbours=4).graph(t), allow_disconnected=True)  # noqa: E731

    def loc(i, t, x0):
        return quad_client(i, t + 1, x0, {"lam": lam, "lr": 0.1 * 0.998**t})

    ref = simulate(np.tile(X0, (M, 1)), loc, W, T, beta=beta, anchor=anchor, sequential_inplace=True)
    np.testing.assert_allclose(s.models.data, ref, atol=1e-12)
    sync = simulate(np.tile(X0, (M, 1)), loc, W, T, beta=beta, anchor=anchor)
    assert not np.allclose(ref, sync)  # order matters by design
