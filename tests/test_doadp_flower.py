"""DO-ADP on Flower: strategy + NumPyClient equal the reference simulator; e2e run; budget stop."""

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
import pytest
import torch
from flwr.common import Code, FitRes, RecordDict, Status, ndarrays_to_parameters, parameters_to_ndarrays

from flwr_strategies.clients.doadp import DOADPClient
from flwr_strategies.clients.training import TensorData
from flwr_strategies.doadp import DOADPNetwork, DOADPParams
from flwr_strategies.doadp.graphs import circulant_mixing, ring_topology
from flwr_strategies.doadp.strategy import DOADPStrategy
from flwr_strategies.doadp.torch_oracle import TorchNetworkProblem
from flwr_strategies.setup import ClientSetup, TrainConfig

N, Q, FEAT, CLS = 8, 30, 6, 3


class _Proxy:
    def __init__(self, cid):
        self.cid = str(cid)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEAT, 5), torch.nn.Tanh(), torch.nn.Linear(5, CLS))


def _shards():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(Q, FEAT, generator=g), torch.randint(0, CLS, (Q,), generator=g)) for _ in range(N)]


def _flower_run(params, rounds, privacy=None, eval_every=5, hops=2):
    model = _model()
    init = [p.detach().numpy().copy() for p in model.state_dict().values()]
    proxies = {i: _Proxy(i) for i in range(N)}
    strat = DOADPStrategy(doadp=params, privacy=privacy, eval_every=eval_every, num_clients=N,
                          initial_parameters=init, topology=ring_topology(N, hops), weights="uniform",
                          partition_resolver=lambda cm: proxies)
    shards = _shards()
    states = [RecordDict() for _ in range(N)]
    tc = TrainConfig(lr=params.alpha, local_epochs=None, local_steps=1, batch_size=params.batch_size)
    log = []
    for rnd in range(1, rounds + 1):
        ins = strat.configure_fit(rnd, None, None)
        if not ins:
            log.append(None)
            break
        results = []
        for proxy, fitins in ins:
            pid = int(proxy.cid)
            setup = ClientSetup(partition_id=pid, num_partitions=N, model=_model(),
                                train_data=TensorData(*shards[pid]), test_data=None, train=tc,
                                device=torch.device("cpu"), seed=0, state=states[pid])
            arrays, n, metrics = DOADPClient(setup, {}).fit(parameters_to_ndarrays(fitins.parameters), fitins.config)
            results.append((proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), n, metrics)))
        _, metrics = strat.aggregate_fit(rnd, results, [])
        log.append(metrics)
    return strat, states, init, log


def test_flower_path_equals_reference_simulator():
    params = DOADPParams(alpha=0.1, gamma=0.05, beta=0.15, p=0.7, k=10, sigma=0.05, G=1.0, batch_size=2, seed=3)
    T = 12
    strat, states, init, log = _flower_run(params, T)
    x0 = np.concatenate([a.ravel() for a in init]).astype(np.float64)
    W = circulant_mixing(N, 2)
    assert np.array_equal(W, strat.W_dense)
    net = DOADPNetwork(TorchNetworkProblem(_model(), _shards()), W, x0, params)
    for _ in range(T):
        net.step()
    X_fl = np.stack([states[i]["doadp"].to_numpy_ndarrays()[0] for i in range(N)])
    assert np.max(np.abs(X_fl - net.X)) < 1e-12
    assert np.max(np.abs(strat.models.data - net.XHAT)) < 1e-12
    # public copies held by the server equal each agent's own copy
    XH_own = np.stack([states[i]["doadp"].to_numpy_ndarrays()[2] for i in range(N)])
    assert np.array_equal(XH_own, strat.models.data)
    # metrics: active agents, paper rate and P2P bytes (k values + k indices to each of 4 neighbours)
    d = x0.size
    for m in log:
        assert m["paper_rate"] == pytest.approx(m["active"] * 10 / (N * d))
        assert m["p2p_bytes"] == m["active"] * 4 * 10 * (8 + 2)
    assert net.active_steps == sum(m["active"] for m in log)


def test_budget_stop_and_spent_epsilon():  # noqa: D103
    from flwr_strategies.privacy import doadp_sigma

    # calibrated for 100 iterations, then a quarter of that noise: the budget runs out after ~10 rounds
    sigma = doadp_sigma(0.5, 1e-5, 100, 0.8, 10, 53, Q, 1.0, strict=True) / 4
    params = DOADPParams(alpha=0.05, p=0.8, k=10, sigma=sigma, G=1.0, seed=0)
    priv = {"epsilon": 0.5, "delta0": 1e-5, "q": Q, "mode": "paper"}
    strat, _, _, log = _flower_run(params, 40, privacy=priv)
    spent = [m["epsilon_spent"] for m in log if m]
    assert all(a < b for a, b in zip(spent, spent[1:]))
    assert spent[-1] <= 0.5 and log[-1] is None and strat.budget_exhausted
    assert strat.spent_epsilon(len(spent) + 1) > 0.5
    assert all(m["epsilon_spent_conservative"] >= m["epsilon_spent"] for m in log if m)


def test_disconnected_or_time_varying_graph_rejected():
    from flwr_strategies.decentralized import Topology

    model = _model()
    init = [p.detach().numpy().copy() for p in model.state_dict().values()]
    with pytest.raises(ValueError):
        DOADPStrategy(doadp=DOADPParams(k=5), num_clients=N, initial_parameters=init,
                      topology=Topology("random", N, seed=0, neighbours=2))
    with pytest.raises(ValueError, match="k="):
        DOADPStrategy(doadp=DOADPParams(k=10**6), num_clients=N, initial_parameters=init,
                      topology=ring_topology(N, 1))


def test_e2e_runner_learns():
    from flwr_strategies.simulations.experiment import ExperimentConfig
    from flwr_strategies.simulations.runner import run_experiment

    cfg = ExperimentConfig(method="dmsgd", dataset="digits", num_clients=10, rounds=60, seed=0, lr=0.3,
                           local_steps=1, batch_size=8, model="logreg", params={"eval_every": 20, "hops": 2})
    res = run_experiment(cfg)
    accs = [r["accuracy"] for r in res["rounds"] if r.get("accuracy") is not None]
    assert accs[-1] > 0.6
