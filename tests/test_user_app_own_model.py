"""A user's own Message-API app, not shaped like ours: its own task (20-D Gaussian blobs, 5 classes),
its own tanh MLP, a ``DataLoader`` of ``(x, y)`` tuples over a ``TensorDataset``, its own training
loop. The same app switches to DFedCata, FedLi-LS, FedMUD and DO-ADP with the client pieces, and
runs on Flower's ``Grid`` protocol in process (the ``flwr run`` path is tested by
``test_dropin_apps.py``). Each method must learn (DO-ADP: run, stay finite and report its epsilon),
and a run repeats bit for bit on the same seeds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from flwr_strategies import serverapp as fs
from flwr_strategies.clients.app import message_config, partition_query, train_reply
from flwr_strategies.clients.dfedcata import MoreauEnvelope
from flwr_strategies.clients.doadp import ClientBudget, DOADPAgent, IndexedData, set_client_seed
from flwr_strategies.clients.fedli import ArmijoSGD
from flwr_strategies.clients.fedmud import FedMUDRound
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

NODES = 3
SAMPLES = 240
LR = 0.05


# ---------------------------------------------------------------- the user's task (not ours)
class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(20, 48), nn.Tanh(), nn.Linear(48, 48), nn.Tanh(), nn.Linear(48, 5))

    def forward(self, x):
        return self.body(x)


def blobs(n: int, seed: int) -> TensorDataset:
    centres = torch.randn(5, 20, generator=torch.Generator().manual_seed(1234)) * 1.2
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 5, (n,), generator=g)
    return TensorDataset(centres[y] + torch.randn(n, 20, generator=g) * 1.5, y)


def train_loader(pid: int, server_round: int) -> DataLoader:
    shuffle = torch.Generator().manual_seed(1000 * server_round + pid)
    return DataLoader(blobs(SAMPLES, 100 + pid), batch_size=16, shuffle=True, generator=shuffle)


def fit(model, loader, optimizer=None) -> float:
    lossf = nn.CrossEntropyLoss()
    opt = optimizer or torch.optim.SGD(model.parameters(), lr=LR)
    model.train()
    total = 0.0
    for x, y in loader:
        if isinstance(opt, ArmijoSGD):
            total += float(opt.step(lambda: lossf(model(x), y)))
        else:
            opt.zero_grad()
            loss = lossf(model(x), y)
            loss.backward()
            opt.step()
            total += loss.item()
    return total / len(loader)


def accuracy(model, data: TensorDataset) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(data.tensors[0]).argmax(1) == data.tensors[1]).float().mean())


# ---------------------------------------------------------------- the user's ClientApp, switched per method
def client_app(method: str, rounds: int = 6) -> ClientApp:
    app = ClientApp()
    app.query("partition")(partition_query)

    @app.train()
    def train(msg: Message, context: Context):
        pid = int(context.node_config["partition-id"])
        cfg = message_config(msg)
        loader = train_loader(pid, int(cfg.get("server-round", 0)))
        model = Classifier()
        if method == "doadp":
            set_client_seed(context.state, 77 + pid)  # a node's own secret (tests only: fixed)
            agent = DOADPAgent(msg.content["arrays"].to_numpy_ndarrays(), cfg, context.state,
                               budget=ClientBudget(epsilon=1.0, rounds=rounds))  # the node's own budget
            arrays, metrics = agent.train(model, IndexedData(loader))
            agent.save(context.state)
            return train_reply(msg, context, arrays, len(loader.dataset), metrics)
        if method == "fedmud":
            mud = FedMUDRound.from_message(model, msg, context)
            loss = fit(model, loader)
            return mud.reply(msg, context, len(loader.dataset), {"train_loss": loss})
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        metrics = {"num-examples": len(loader.dataset)}
        if method == "dfedcata":
            MoreauEnvelope(model, lam=cfg["lam"]).attach()
            metrics["train_loss"] = fit(model, loader)
        elif method == "fedli-ls":
            opt = ArmijoSGD(model.parameters(), batch_fraction=1 / len(loader))
            metrics["train_loss"] = fit(model, loader, opt)
            metrics["step_size"] = opt.step_size
        else:
            metrics["train_loss"] = fit(model, loader)
        content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord(metrics)})
        return Message(content, reply_to=msg)

    return app


def strategy(method: str, rounds: int):
    return {
        "dfedcata": lambda: fs.DFedCata(fraction_evaluate=0.0, beta=0.9, topology="ring"),
        "fedli-ls": lambda: fs.FedLiLS(fraction_evaluate=0.0),
        "fedmud": lambda: fs.FedMUD(model=Classifier(), fraction_evaluate=0.0, fraction_train=1.0, target_ratio=0.5),
        "doadp": lambda: fs.DOADP(local_dataset_size=SAMPLES, lr=0.5, batch_size=16, epsilon=1.0, delta=1e-5,
                                  num_rounds=rounds, fraction_evaluate=0.0),
    }[method]()


def run(method: str, rounds: int = 6):
    test = blobs(1000, 7)
    accs: dict[int, float] = {}

    def central(server_round, arrays):
        model = Classifier()
        model.load_state_dict(arrays.to_torch_state_dict())
        accs[server_round] = accuracy(model, test)
        return MetricRecord({"accuracy": accs[server_round]})

    torch.manual_seed(0)
    init = ArrayRecord(Classifier().state_dict())
    strat = strategy(method, rounds)
    # DO-ADP evaluates every eval_every rounds: central_evaluation makes Flower's evaluate_fn follow it
    evaluate_fn = strat.central_evaluation(central) if method == "doadp" else central
    result = strat.start(grid=InProcessGrid(client_app(method, rounds), NODES), initial_arrays=init, num_rounds=rounds,
                         evaluate_fn=evaluate_fn)
    return accs, result, strat


@pytest.mark.parametrize("method", ["dfedcata", "fedli-ls", "fedmud"])
def test_users_own_app_learns_with_the_method(method):
    accs, _, strat = run(method)
    assert accs[0] < 0.4, accs
    assert accs[6] >= 0.85, (method, accs)
    # the strategy's own record: every node trained every round, nothing was rejected
    rounds = [r for r in strat.history.rounds if r["round"] > 0]
    assert all(r["failures"] == 0 and r["rejected"] == 0 for r in rounds), rounds


def test_users_own_app_runs_doadp_privately():
    accs, result, strat = run("doadp", rounds=10)
    final = [np.asarray(a) for a in result.arrays.to_numpy_ndarrays()]
    assert all(np.isfinite(a).all() for a in final)
    assert set(accs) == set(range(11))  # every round (eval_every=1, as Flower's strategies), round 0 included
    last = strat.history.rounds[-1]
    # the certified epsilon at the target delta, within the target; every node trained every round
    # (each checked the server's noise against its own budget), and no reply says how it was seeded
    assert 0 < last["fit_dp_epsilon"] <= 1.0 and last["fit_dp_delta"] == pytest.approx(1e-5), last
    assert all(r["failures"] == 0 for r in strat.history.rounds), strat.history.rounds
    assert not [k for r in strat.history.rounds for k in r if "seed" in k or "entropy" in k]


@pytest.mark.parametrize("method", ["dfedcata", "fedmud", "doadp"])
def test_users_own_app_repeats_bit_for_bit(method):
    a = run(method, rounds=2)[1].arrays.to_numpy_ndarrays()
    b = run(method, rounds=2)[1].arrays.to_numpy_ndarrays()
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
