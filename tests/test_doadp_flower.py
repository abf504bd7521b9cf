"""The cores + ready-made clients (the Flower path without the transport) equal the NumPy reference
simulators for the same client-side seeds: DO-ADP, D-mSGD, DPDO, DP-DDA and CPGT."""

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
import pytest
import torch
from flwr.app import RecordDict

from flwr_strategies.clients.doadp import ClientBudget, DOADPClient, set_client_seed
from flwr_strategies.clients.doadp_baselines import CPGTClient, DPDDAClient, DPDOClient
from flwr_strategies.clients.training import TensorData
from flwr_strategies.core.messages import Reply
from flwr_strategies.doadp import DOADPNetwork, DOADPParams
from flwr_strategies.doadp.baseline_server import CPGTServer, DPDDAServer, DPDOServer
from flwr_strategies.doadp.baselines import BatchGrad, run_cpgt, run_dpdda, run_dpdo
from flwr_strategies.doadp.config import CPGTConfig, DMSGDConfig, DOADPConfig, DPDDAConfig, DPDOConfig
from flwr_strategies.doadp.graphs import circulant_mixing
from flwr_strategies.doadp.server import DMSGDServer, DOADPServer
from flwr_strategies.doadp.simulator import run_dmsgd
from flwr_strategies.doadp.torch_oracle import TorchNetworkProblem
from flwr_strategies.setup import ClientSetup, TrainConfig

N, Q, FEAT, CLS, HOPS, B = 6, 30, 5, 3, 2, 4
SEEDS = [11 + i for i in range(N)]
GRAPH = DOADPServer.default_graph(neighbours=2 * HOPS + 1)  # the circulant i +- 1..HOPS


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEAT, 4), torch.nn.Tanh(), torch.nn.Linear(4, CLS))


def _shards():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(Q, FEAT, generator=g), torch.randint(0, CLS, (Q,), generator=g)) for _ in range(N)]


def _x0():
    return np.concatenate([p.detach().numpy().ravel() for p in _model().parameters()]).astype(np.float64)


def _run_cores(core, client_cls, rounds, **client_kw):
    """Drive a core and one ready-made client per agent (state in a RecordDict, client-side seed)."""
    shards = _shards()
    states = []
    for i in range(N):
        st = RecordDict()
        set_client_seed(st, SEEDS[i])
        states.append(st)
    tc = TrainConfig(lr=0.1, local_epochs=None, local_steps=1, batch_size=B)
    c = core.config  # each node's own budget: the run's (the clients check the server's noise against it)
    budget = ClientBudget(epsilon=float(getattr(c, "epsilon", 1.0)), rounds=core.num_rounds,
                          delta=float(getattr(c, "delta", 1e-5)), clip=float(getattr(c, "clip", 1.0)))
    for r in range(1, rounds + 1):
        replies = []
        for ins in core.configure_train(r, list(range(N))):
            pid = ins.partition_id
            setup = ClientSetup(partition_id=pid, num_partitions=N, model=_model(), train_data=TensorData(*shards[pid]),
                                test_data=None, train=tc, device=torch.device("cpu"), seed=0, state=states[pid])
            arrays, n, metrics = client_cls(setup, {}, budget=budget, **client_kw).fit(ins.arrays, ins.config)
            replies.append(Reply(pid, arrays, n, metrics))
        out = core.train_round(r, replies, sampled=range(N), on_bad_reply="raise")
        assert out["rejected"] == 0 and out["failures"] == 0
    return states


def _init():
    return [p.detach().numpy().copy() for p in _model().parameters()]


def test_doadp_core_and_clients_equal_reference_simulator():
    T = 8
    core = DOADPServer(_init(), num_partitions=N, num_rounds=T, dataset_size=Q, alpha=0.1, batch_size=B, graph=GRAPH,
                       config=DOADPConfig(p=0.7, k_frac=0.3, sigma=0.3, epsilon=50.0, msg_dtype="float64"))
    states = _run_cores(core, DOADPClient, T)
    params = DOADPParams(alpha=0.1, beta=0.15, p=0.7, k=core.k, sigma=core.sigma, clip=1.0, batch_size=B)
    net = DOADPNetwork(TorchNetworkProblem(_model(), _shards()), circulant_mixing(N, HOPS), _x0(), params, gamma=0.05,
                       client_seeds=SEEDS)
    for _ in range(T):
        net.step()
    X = np.stack([states[i]["doadp"].to_numpy_ndarrays()[0] for i in range(N)])
    assert np.max(np.abs(X - net.X)) < 1e-12
    assert np.max(np.abs(core.XHAT - net.XHAT)) < 1e-12
    # the public copies the server holds equal every agent's own copy, bit for bit
    own = np.stack([states[i]["doadp"].to_numpy_ndarrays()[2] for i in range(N)])
    assert np.array_equal(own, core.XHAT)
    assert np.array_equal(core.active_steps, net.active_steps)


def test_dmsgd_core_equals_reference():
    T = 6
    core = DMSGDServer(_init(), num_partitions=N, num_rounds=T, dataset_size=Q, alpha=0.1, batch_size=B, graph=GRAPH,
                       config=DMSGDConfig())
    states = _run_cores(core, DOADPClient, T, require_private=False)
    ref = run_dmsgd(TorchNetworkProblem(_model(), _shards()), circulant_mixing(N, HOPS), _x0(), alpha=0.1, gamma=0.05,
                    beta=0.15, T=T, client_seeds=SEEDS, batch_size=B, eval_every=T)
    X = np.stack([states[i]["doadp"].to_numpy_ndarrays()[0] for i in range(N)])
    assert np.max(np.abs(X - ref["X"])) < 1e-12


BG = BatchGrad(batch_size=B, clip=1.0)


def test_dpdo_core_equals_reference():
    T = 6
    core = DPDOServer(_init(), num_partitions=N, num_rounds=T, dataset_size=Q, alpha=0.1, batch_size=B, graph=GRAPH,
                      config=DPDOConfig(epsilon=5.0))
    states = _run_cores(core, DPDOClient, T)
    ref = run_dpdo(TorchNetworkProblem(_model(), _shards()), circulant_mixing(N, HOPS), _x0(), b0=core.b0, c=0.1,
                   T=T, bg=BG, client_seeds=SEEDS, eval_every=T)
    assert np.max(np.abs(core.Y - ref["Y"])) < 1e-12
    X = np.stack([states[i]["dpdo"].to_numpy_ndarrays()[0] for i in range(N)])
    assert np.max(np.abs(X - ref["X"])) < 1e-12


def test_dpdda_core_equals_reference():
    T = 6
    core = DPDDAServer(_init(), num_partitions=N, num_rounds=T, dataset_size=Q, alpha=0.1, batch_size=B, graph=GRAPH,
                       config=DPDDAConfig(epsilon=50.0, p_s=0.5, sigma=0.3, beta0=10.0))
    _run_cores(core, DPDDAClient, T)
    ref = run_dpdda(TorchNetworkProblem(_model(), _shards()), circulant_mixing(N, HOPS), _x0(), sigma=core.sigma, T=T,
                    p_s=0.5, beta0=10.0, reg=core.reg, bg=BatchGrad(batch_size=B, clip=1.0, clip_mode="l2"),
                    client_seeds=SEEDS, eval_every=T)
    assert np.max(np.abs(core.Z - ref["Z"])) < 1e-12
    assert np.max(np.abs(core.global_arrays()[0].ravel() - ref["xbar"][:FEAT * 4].astype(np.float32))) < 1e-6


def test_cpgt_core_equals_reference():
    T = 6
    core = CPGTServer(_init(), num_partitions=N, num_rounds=T, dataset_size=Q, alpha=0.1, batch_size=B, graph=GRAPH,
                      config=CPGTConfig(epsilon=5.0, k_frac=0.3))
    states = _run_cores(core, CPGTClient, T)
    ref = run_cpgt(TorchNetworkProblem(_model(), _shards()), circulant_mixing(N, HOPS), _x0(), b0=core.b0, k=core.k,
                   lr=0.1, T=T, bg=BG, client_seeds=SEEDS, eval_every=T)
    assert np.max(np.abs(core.H["x"] - ref["H"]["x"])) < 1e-12
    assert np.max(np.abs(core.H["y"] - ref["H"]["y"])) < 1e-12
    X = np.stack([states[i]["cpgt"].to_numpy_ndarrays()[0] for i in range(N)])
    assert np.max(np.abs(X - ref["X"])) < 1e-12


@pytest.mark.parametrize("n", [2, 4])
def test_small_networks_build(n):
    # 4 agents with the paper's neighbourhood of 7 (i +- 1, 2, 3): the complete graph, logged and
    # reported in every round's metrics, never silently
    core = DOADPServer(_init(), num_partitions=n, num_rounds=3, dataset_size=Q, batch_size=B,
                       config=DOADPConfig(sigma=1.0, epsilon=50.0))
    assert core.W.shape == (n, n)
    assert np.allclose(core.W.toarray().sum(axis=0), 1) and np.allclose(core.W.toarray().sum(axis=1), 1)
    assert (core.W.toarray() > 0).all()
    assert "neighbours=7 exceeds the" in core.topology.adjustment
    assert core.train_round(1, [], sampled=[])["graph_adjusted"] == 1
