"""DO-ADP client pieces alone (torch-native), and the drop-in: a hand-written ClientApp on the
user's own model and DataLoader, driven by the Message-API ``DOADP`` strategy."""

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from torch.utils.data import DataLoader, TensorDataset

from flwr_strategies.clients.app import message_config, partition_query, train_reply
from flwr_strategies.clients.doadp import (
    ClientBudget,
    DOADPAgent,
    DOADPClient,
    IndexedData,
    Privatizer,
    TopKPublicCopy,
    UniformBatchSampler,
    client_seed_of,
    flat_parameters,
    per_sample_gradients,
    private_generator,
    set_client_seed,
)
from flwr_strategies.clients.training import TensorData
from flwr_strategies.doadp import AgentState, DOADPParams, agent_round
from flwr_strategies.setup import ClientSetup, TrainConfig

F, C = 5, 3


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(F, 4), torch.nn.Tanh(), torch.nn.Linear(4, C))


def _data(n=40, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, F, generator=g), torch.randint(0, C, (n,), generator=g)


def test_per_sample_gradients_match_autograd():
    model = _model()
    x, y = _data(6)
    got = per_sample_gradients(model, torch.nn.functional.cross_entropy, x, y)
    for i in range(6):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        ref = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double().numpy()
        assert np.allclose(got[i], ref, atol=1e-6)


def test_pieces_reproduce_one_agent_round():
    model, (x, y) = _model(), _data()
    d = flat_parameters(model).size
    params = DOADPParams(alpha=0.1, beta=0.15, p=1.0, k=7, sigma=0.3, clip=1.0, batch_size=4)
    cons = np.random.default_rng(3).normal(size=d) * 0.01
    state = AgentState.initial(flat_parameters(model), "zero")
    loss = torch.nn.functional.cross_entropy

    def grad_fn(xv, idx):
        return per_sample_gradients(model, loss, x[idx], y[idx], params=xv)

    nxt, res = agent_round(state, cons, params, private_generator(5, 0), grad_fn, len(y))
    # the same round from the pieces, in a user's own loop
    rng = private_generator(5, 0)
    assert rng.random() < params.p  # the activation coin
    batch = next(iter(UniformBatchSampler(len(y), 4, 1, rng)))
    privatizer = Privatizer(sigma=0.3, clip=1.0, beta=0.15, batch_size=4, generator=rng)
    m = privatizer(per_sample_gradients(model, loss, x[batch], y[batch]))
    x_new = torch.from_numpy(state.x) - 0.1 * m + torch.from_numpy(cons)
    copy = TopKPublicCopy(d, 7, msg_dtype="float64")
    idx, val = copy.message(x_new)
    copy.apply(idx, val)
    assert np.array_equal(batch, res.batch)
    assert np.array_equal(idx.numpy(), res.indices) and np.array_equal(val.numpy(), res.values)
    assert np.array_equal(x_new.numpy(), nxt.x) and np.array_equal(copy.xhat.numpy(), nxt.xhat)


def test_indexed_data_accepts_tensors_loaders_and_iterables():
    x, y = _data(12)
    idx = np.array([0, 5, 11])
    views = [IndexedData(TensorData(x, y)), IndexedData(DataLoader(TensorDataset(x, y), batch_size=5, shuffle=True)),
             IndexedData(TensorDataset(x, y)), IndexedData([(x[:7], y[:7]), (x[7:], y[7:])])]
    for v in views:
        assert len(v) == 12
        xb, yb = v.batch(idx)
        assert torch.equal(xb, x[idx]) and torch.equal(yb, y[idx])


def _config(t=0, accepted=0, x0=None):
    return {"t": t, "doadp_private": 1, "doadp_alpha": 0.1, "doadp_beta": 0.15, "doadp_p": 1.0, "doadp_k": 5,
            "doadp_sigma": 0.2, "doadp_clip": 1.0, "doadp_clip_mode": "coordinate", "doadp_batch_size": 4,
            "doadp_sampling": "uniform", "doadp_msg_dtype": "float32", "doadp_public_copy": "zero",
            "doadp_accepted": accepted, "report_model": 0}


@pytest.mark.parametrize("wrap", [lambda x, y: DataLoader(TensorDataset(x, y), batch_size=8),
                                  lambda x, y: [(x[i:i + 8], y[i:i + 8]) for i in range(0, len(y), 8)]])
def test_ready_made_client_on_a_dataloader_equals_tensors(wrap):
    x, y = _data()
    out = []
    for data in (TensorData(x, y), wrap(x, y)):
        state = RecordDict()
        setup = ClientSetup(0, 1, _model(), data, None, TrainConfig(), torch.device("cpu"), 0, state)
        client = DOADPClient(setup, {}, client_seed=9, budget=ClientBudget(epsilon=100.0, rounds=5))
        x0 = flat_parameters(_model())
        arrays, n, metrics = client.fit([np.zeros_like(x0), x0], _config())
        out.append((arrays, n, state["doadp"].to_numpy_ndarrays()))
    (a1, n1, s1), (a2, n2, s2) = out
    assert n1 == n2 == 40
    assert all(np.array_equal(u, v) for u, v in zip(a1, a2)) and all(np.array_equal(u, v) for u, v in zip(s1, s2))


def test_client_seed_sources():
    st = RecordDict()
    assert client_seed_of(st, {"partition-id": 0}) is None
    set_client_seed(st, 42)
    assert client_seed_of(st, {}) == 42
    node_seed = "9f86d081884c7d659a2feaa0c55ad015"  # 128 bits, the deployment form
    assert client_seed_of(st, {"doadp-client-seed": node_seed}) == int(node_seed, 16)  # node config wins
    for weak in (7, "7", "00000000000000000000000000000007", "9f86d081884c7d659a2feaa0c55ad0"):
        with pytest.raises(ValueError, match="doadp-client-seed.*at least 128 bits"):
            client_seed_of(st, {"doadp-client-seed": weak})
    with pytest.raises(ValueError, match="client_seed"):
        set_client_seed(st, -1)


# --------------------------------------------------------------------------- the drop-in
def user_client_app() -> ClientApp:
    """A quickstart-style ClientApp: the user's own model and DataLoader, plus DO-ADP's lines."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        model = _model()
        pid = int(context.node_config["partition-id"])
        x, y = _data(seed=10 + pid)
        trainloader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
        # --- DO-ADP: the agent's round on the user's model and data (5 lines) ---
        agent = DOADPAgent(msg.content["arrays"].to_numpy_ndarrays(), message_config(msg), context.state,
                           client_seed=client_seed_of(context.state, context.node_config),
                           budget=ClientBudget(epsilon=1.0, rounds=3))  # the node's own budget
        arrays, metrics = agent.train(model, trainloader)
        agent.save(context.state)
        return train_reply(msg, context, arrays, len(trainloader.dataset), metrics)

    app.query("partition")(partition_query)
    return app


def test_user_app_runs_under_the_message_api_doadp():
    from flwr_strategies.doadp.serverapp import DOADP
    from flwr_strategies.simulations.inprocess_grid import InProcessGrid

    def run(seed_clients):
        grid = InProcessGrid(user_client_app(), 3)
        if seed_clients:
            for ctx in grid.contexts.values():
                set_client_seed(ctx.state, 100 + int(ctx.node_config["partition-id"]))
        strategy = DOADP(local_dataset_size=40, num_rounds=3, lr=0.1, batch_size=8, epsilon=1.0, k_frac=0.3,
                         min_available_nodes=3)
        init = ArrayRecord(_model().state_dict())
        result = strategy.start(grid=grid, initial_arrays=init, num_rounds=3)
        return result, strategy

    r1, s1 = run(True)
    r2, s2 = run(True)
    assert np.array_equal(s1.core.XHAT, s2.core.XHAT) and s1.core.XHAT.any()
    assert set(r1.arrays.keys()) == set(_model().state_dict().keys())  # the model comes back in the user's layout
    m = r1.train_metrics_clientapp[3]
    assert m["dp_delta"] == 1e-5 and 0 < m["dp_epsilon"] <= 1.0 and m["active"] + m["inactive"] == 3
