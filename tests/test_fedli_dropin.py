"""A Flower app in the shape of quickstart-pytorch (own model, own DataLoader of dict batches, own
``train()``; ``@app.train()`` / ``@app.evaluate()``; ``Strategy.start``) switched to FedLi-LS and to
SCAFFOLD with the lines the README shows (marked ``# <--``), run on the Message API in process."""

import os

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn
from torch.utils.data import DataLoader, Dataset

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
torch.set_num_threads(1)

from flwr_strategies.clients.app import partition_query  # noqa: E402
from flwr_strategies.clients.fedli import ArmijoConfig, ArmijoSGD, ScaffoldSession  # noqa: E402
from flwr_strategies.fedli.serverapp import FedLiLS, Scaffold  # noqa: E402
from flwr_strategies.simulations.inprocess_grid import InProcessGrid  # noqa: E402

NUM_NODES = 4


# ---------------------------------------------------------------- the user's own pieces
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class Blobs(Dataset):  # returns {"img", "label"} like flwr-datasets
    def __init__(self, seed, n=96):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.x = torch.randn(n, 4, 4, generator=g) * 0.7 + self.y.view(-1, 1, 1).float()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"img": self.x[i], "label": self.y[i]}


def load_data(partition_id):
    return DataLoader(Blobs(partition_id), batch_size=16, shuffle=False)


def evaluate_net(net, loader):
    net.eval()
    correct, loss, n = 0, 0.0, 0
    with torch.no_grad():
        for batch in loader:
            out = net(batch["img"])
            loss += float(nn.functional.cross_entropy(out, batch["label"], reduction="sum"))
            correct += int((out.argmax(1) == batch["label"]).sum())
            n += len(batch["label"])
    return loss / n, correct / n


def initial_net():
    torch.manual_seed(0)
    return Net()


# ---------------------------------------------------------------- FedLi-LS: the user's train()
def train_fedli_ls(net, trainloader, epochs, config):
    criterion = nn.CrossEntropyLoss()
    optimizer = ArmijoSGD(net.parameters(), ArmijoConfig.from_mapping(config),  # <-- was torch.optim.SGD
                          batch_fraction=1 / len(trainloader))                    # <--
    net.train()
    for _ in range(epochs):
        for batch in trainloader:
            images, labels = batch["img"], batch["label"]
            optimizer.step(lambda: criterion(net(images), labels))  # <-- was zero_grad / backward / step  # noqa: B023
    return optimizer.summary()  # <-- train_loss and the step_size the server needs


# ---------------------------------------------------------------- SCAFFOLD: the user's train()
def train_scaffold(net, trainloader, epochs, lr, session):
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    net.train()
    for _ in range(epochs):
        for batch in trainloader:
            optimizer.zero_grad()
            criterion(net(batch["img"]), batch["label"]).backward()
            session.correction.apply()  # <-- g - c_i + c
            optimizer.step()


def make_app(method):
    app = ClientApp()
    app.query("partition")(partition_query)  # <-- answers the strategy's partition query

    @app.train()
    def train(msg: Message, context: Context):
        pid = int(context.node_config["partition-id"])
        net = initial_net()
        loader = load_data(pid)
        if method == "fedli-ls":
            net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
            metrics = train_fedli_ls(net, loader, 1, msg.content["config"])
            arrays = ArrayRecord(net.state_dict())
        else:
            session = ScaffoldSession(net, msg.content["arrays"].to_numpy_ndarrays(), context.state)  # <--
            train_scaffold(net, loader, 1, 0.1, session)
            arrays = ArrayRecord(session.finish(0.1))  # <-- w_i ++ dc_i; c_i+ kept in context.state
            metrics = {"train_loss": evaluate_net(net, loader)[0]}
        return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord({**metrics, "num-examples": len(loader.dataset)})}),
                       reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context):
        net = initial_net()
        net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        loss, acc = evaluate_net(net, load_data(int(context.node_config["partition-id"])))
        return Message(RecordDict({"metrics": MetricRecord({"eval_loss": loss, "eval_acc": acc, "num-examples": 96})}),
                       reply_to=msg)

    return app


def _run(strategy, method, rounds=3):
    grid = InProcessGrid(make_app(method), NUM_NODES)
    central = DataLoader(Blobs(99), batch_size=96)

    def evaluate_fn(server_round, arrays):
        net = initial_net()
        net.load_state_dict(arrays.to_torch_state_dict())
        loss, acc = evaluate_net(net, central)
        return MetricRecord({"loss": loss, "accuracy": acc})

    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(initial_net().state_dict()), num_rounds=rounds,
                            evaluate_fn=evaluate_fn)
    strategy.accuracy = [m["accuracy"] for _, m in sorted(result.evaluate_metrics_serverapp.items())]
    return strategy, grid


def test_quickstart_shaped_app_switched_to_fedli_ls():
    strategy, _ = _run(FedLiLS(fraction_train=0.5, min_available_nodes=NUM_NODES), "fedli-ls")  # <-- was FedAvg(...)
    acc = strategy.accuracy
    assert acc[-1] > acc[0] + 0.2
    last = strategy.history.rounds[-1]
    assert last["fit_eta_g"] == 1.0 and 0 < last["fit_step_size"] and last["rejected"] == 0
    assert last["federated_eval_acc"] > 0.3  # federated evaluation through @app.evaluate()


def test_quickstart_shaped_app_switched_to_scaffold_keeps_c_i_on_the_nodes():
    strategy, grid = _run(Scaffold(fraction_train=0.5, min_available_nodes=NUM_NODES, fraction_evaluate=0.0), "scaffold")
    acc = strategy.accuracy
    assert acc[-1] > acc[0] + 0.2 and strategy.history.rounds[-1]["rejected"] == 0
    holders = [c for c in grid.contexts.values() if "scaffold_c_i" in c.state]
    assert holders and strategy.core.client_controls == {}  # the server keeps no per-client table
    assert all(np.any(a) for c in holders for a in c.state["scaffold_c_i"].to_numpy_ndarrays()[:2])
