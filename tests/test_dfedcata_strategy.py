"""DFedCata / DFedAvg / D-PSGD server cores against the reference simulator (spec oracles 1, 11, 20-22)."""

import numpy as np
import pytest
import torch

from flwr_strategies.core.messages import Reply
from flwr_strategies.decentralized import Topology, mix, mixing_matrix
from flwr_strategies.dfedcata.config import DFedCataConfig
from flwr_strategies.dfedcata.local import local_update
from flwr_strategies.dfedcata.reference import simulate
from flwr_strategies.dfedcata.server import DFedAvgServer, DFedCataServer, DPSGDServer

M, D = 8, 6
RNG = np.random.default_rng(1)
C = RNG.standard_normal((M, D))
X0 = RNG.standard_normal(D)


def _top():
    return Topology("random", M, seed=4, neighbours=4)


def _make(cls, init=None, sched=lambda r: 0.1 * 0.998 ** (r - 1), dtype=np.float64, **cfg):
    kw = {"config": DFedCataConfig(**cfg)} if cls is DFedCataServer else {}
    return cls([X0.reshape(2, 3).astype(np.float64)] if init is None else init, num_partitions=M, topology=_top(),
               on_train_config=lambda r: {"lr": sched(r)}, dtype=dtype, **kw)


def _drive(core, rounds, client, skip=lambda r, pid: False, order=None, first=1):
    """Run rounds through the core's public API; returns the start points sent each round."""
    sent = []
    for r in range(first, first + rounds):
        pids = core.select(r, range(M))
        ins = core.configure_train(r, pids)
        sent.append(np.stack([np.concatenate([a.ravel() for a in i.arrays]) for i in ins]) if ins else None)
        replies = [Reply(i.partition_id, client(i.partition_id, r, [a.copy() for a in i.arrays], i.config), 1, {})
                   for i in ins if not skip(r, i.partition_id)]
        if order is not None:
            replies = [replies[k] for k in order(len(replies))]
        core.train_round(r, replies, sampled=[i.partition_id for i in ins], on_bad_reply="raise")
    return sent


def quad_client(pid, r, arrays, cfg, K=3):
    lam, eta = cfg.get("lam", 0.0), cfg["lr"]
    x0 = arrays[0].ravel()
    xs = (C[pid] + lam * x0) / (1 + lam)
    return [(xs + (1 - eta * (1 + lam)) ** K * (x0 - xs)).reshape(arrays[0].shape)]


def _ref_W(t):
    return mixing_matrix(_top().graph(t), allow_disconnected=True)


def _ref_local(lam):
    def loc(i, t, x0):
        return quad_client(i, t + 1, [x0], {"lam": lam, "lr": 0.1 * 0.998**t})[0]
    return loc


@pytest.mark.parametrize("anchor", ["prev_mixed", "prev_local"])
def test_core_matches_reference_simulator(anchor):
    beta, lam = 0.9, 0.05
    s = _make(DFedCataServer, beta=beta, lam=lam, lr=0.1, extrapolation_anchor=anchor)
    _drive(s, 5, quad_client)
    ref = simulate(np.tile(X0, (M, 1)), _ref_local(lam), _ref_W, 5, beta=beta, anchor=anchor)
    np.testing.assert_allclose(s.models.data, ref, atol=1e-12)


def test_results_order_does_not_matter():
    # oracle 22: synchronous semantics
    a = _make(DFedCataServer, beta=0.9, lam=0.05)
    b = _make(DFedCataServer, beta=0.9, lam=0.05)
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


def test_beta0_lambda0_equals_dfedavg_exactly():
    # oracle 1 with a real torch model and minibatches
    data, init = _torch_setup()
    kw = dict(init=init, sched=lambda r: 0.1, dtype=np.float32)
    a = _make(DFedCataServer, beta=0.0, lam=0.0, **kw)
    b = _make(DFedAvgServer, **kw)
    _drive(a, 4, _torch_client(data, {}))
    _drive(b, 4, _torch_client(data, {}))
    np.testing.assert_array_equal(a.models.data, b.models.data)
    c = _make(DFedCataServer, beta=0.5, lam=0.0, **kw)
    _drive(c, 4, _torch_client(data, {}))
    assert not np.array_equal(c.models.data, b.models.data)


def test_anchor_is_the_extrapolated_point():
    # oracles 11 and 20: round 1 sends x^0; later rounds send x + beta (x - x_prev) (= prox anchor)
    s = _make(DFedCataServer, beta=0.8, lam=0.05)
    sent = _drive(s, 3, quad_client)
    np.testing.assert_array_equal(sent[0], np.tile(X0, (M, 1)))
    twin = _make(DFedCataServer, beta=0.8, lam=0.05)
    _drive(twin, 2, quad_client)
    Xp, X = twin.anchors.copy(), twin.models.data.copy()
    np.testing.assert_allclose(sent[2], X + 0.8 * (X - Xp), atol=1e-12)
    assert not np.allclose(sent[2], X)


@pytest.mark.parametrize("anchor", ["prev_mixed", "prev_local"])
def test_failed_client_skips_round_in_dfedcata(anchor):
    s = _make(DFedCataServer, beta=0.9, lam=0.05, extrapolation_anchor=anchor)
    _drive(s, 2, quad_client)
    X, Xp = s.models.data.copy(), s.anchors.copy()
    _drive(s, 1, quad_client, skip=lambda r, pid: pid == 2, first=3)
    np.testing.assert_array_equal(s.models.data[2], X[2])
    np.testing.assert_array_equal(s.anchors[2], Xp[2])
    assert np.isfinite(s.models.data).all()


def test_dpsgd_combines_old_models_plus_local_step():
    s = _make(DPSGDServer)
    X = np.tile(X0, (M, 1))
    _drive(s, 1, lambda pid, r, a, cfg: [a[0] - 0.1 * (a[0] - C[pid].reshape(a[0].shape))])
    W = _ref_W(0)
    np.testing.assert_allclose(s.models.data, mix(W, X) - 0.1 * (X - C), atol=1e-12)
    # exactly (W X + Y) - X in the table's dtype, row by row
    Y = X - 0.1 * (X - C)
    np.testing.assert_array_equal(s.models.data, (mix(W, X) + Y) - X)


def test_dpsgd_failed_peer_keeps_its_model():
    s = _make(DPSGDServer)
    _drive(s, 1, lambda pid, r, a, cfg: [a[0] - 0.1 * (a[0] - C[pid].reshape(a[0].shape))])
    X1 = s.models.data.copy()
    _drive(s, 1, lambda pid, r, a, cfg: [a[0] + 1.0], skip=lambda r, pid: pid == 5, first=2)
    np.testing.assert_array_equal(s.models.data[5], X1[5])


def test_constructor_validation():
    with pytest.raises(ValueError, match="beta"):
        _make(DFedCataServer, beta=1.0)
    with pytest.raises(ValueError, match="lam"):
        _make(DFedCataServer, lam=-1.0)
    with pytest.raises(ValueError, match="lr \\* lam"):
        _make(DFedCataServer, lam=20.0, lr=0.1)
    s = _make(DFedCataServer, lam=20.0, lr=None, beta=0.5)  # lr unknown up front: checked per round
    with pytest.raises(ValueError, match="lr \\* lam"):
        s.configure_train(1, list(range(M)))


@pytest.mark.parametrize("anchor", ["prev_mixed", "prev_local"])
def test_sequential_inplace_matches_reference(anchor):
    # one Flower round per client: m * T Flower rounds = T algorithm rounds
    beta, lam, T = 0.8, 0.05, 3
    s = _make(DFedCataServer, beta=beta, lam=lam, extrapolation_anchor=anchor, sequential_inplace=True)
    seen = []

    def client(pid, r, arrays, cfg):
        seen.append((cfg["flower_round"], pid, cfg["server-round"]))
        return quad_client(pid, cfg["server-round"], arrays, cfg)

    for r in range(1, M * T + 1):
        ins = s.configure_train(r, s.select(r, range(M)))
        assert len(ins) == 1
        (i,) = ins
        s.train_round(r, [Reply(i.partition_id, client(i.partition_id, r, [a.copy() for a in i.arrays], i.config), 1, {})],
                      sampled=[i.partition_id], on_bad_reply="raise")
        assert s.should_evaluate(r) == (r % M == 0)
    assert [p for _, p, _ in seen] == list(range(M)) * T
    assert [t for _, _, t in seen] == [t for t in range(1, T + 1) for _ in range(M)]  # algorithm round's config
    ref = simulate(np.tile(X0, (M, 1)), _ref_local(lam), _ref_W, T, beta=beta, anchor=anchor, sequential_inplace=True)
    np.testing.assert_allclose(s.models.data, ref, atol=1e-12)
    np.testing.assert_allclose(np.concatenate([a.ravel() for a in s.global_arrays()]), ref.mean(axis=0), atol=1e-12)
    sync = simulate(np.tile(X0, (M, 1)), _ref_local(lam), _ref_W, T, beta=beta, anchor=anchor)
    assert not np.allclose(ref, sync)  # order matters by design


def test_sequential_mode_keeps_one_table_per_state_and_no_spare():
    local = _make(DFedCataServer, extrapolation_anchor="prev_local", sequential_inplace=True)
    mixed = _make(DFedCataServer, extrapolation_anchor="prev_mixed", sequential_inplace=True)
    sync = _make(DFedCataServer)
    size = M * D * 8
    assert local.spare.nbytes == 0 and local.anchors is None
    assert mixed.spare.nbytes == 0 and mixed.anchors.nbytes == size
    assert sync.spare.nbytes == size and sync.anchors.nbytes == size
    assert set(local.extra_state()) == {"models", "global"} and set(sync.extra_state()) == {"models", "anchors"}
