"""A quickstart-pytorch-shaped Flower app switched to DFedCata: the user's own model, DataLoader and
``train()`` stay; the client adds ``with MoreauEnvelope(model, lam=...)`` and the partition query, the
server swaps ``FedAvg(...)`` for ``DFedCata(...)``. Runs through the Message API in-process."""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch.utils.data import DataLoader, TensorDataset

from flwr_strategies.clients.app import partition_query
from flwr_strategies.clients.dfedcata import MoreauEnvelope
from flwr_strategies.dfedcata.serverapp import DFedCata
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

NUM_NODES = 4


# ---- the user's own task.py (as in quickstart-pytorch) ------------------------------------------
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(10, 32)
        self.fc2 = torch.nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def load_data(partition_id: int):
    g = torch.Generator().manual_seed(100 + partition_id)
    w = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
    x = torch.randn(96, 10, generator=g) + 0.5 * partition_id
    y = (x @ w).argmax(dim=1)
    ds = TensorDataset(x, y)
    return DataLoader(ds, batch_size=16, shuffle=True, generator=g), DataLoader(ds, batch_size=32)


def train(net, trainloader, epochs, lr):
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    criterion = torch.nn.CrossEntropyLoss()
    net.train()
    total = 0.0
    for _ in range(epochs):
        for x, y in trainloader:
            optimizer.zero_grad()
            loss = criterion(net(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
    return total / (epochs * len(trainloader))


def evaluate_loader(net, loader):
    net.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for x, y in loader:
            out = net(x)
            loss += torch.nn.functional.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
    n = len(loader.dataset)
    return loss / n, correct / n


# ---- the user's client_app.py, switched to DFedCata ------------------------------------------------
app = ClientApp()
app.query("partition")(partition_query)  # + 1 line: tell the strategy which peer this node is


@app.train()
def client_train(msg: Message, context: Context):
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    trainloader, _ = load_data(context.node_config["partition-id"])
    cfg = msg.content["config"]
    with MoreauEnvelope(model, lam=cfg["lam"]):  # + 1 line: DFedCata's proximal term around the start point
        train_loss = train(model, trainloader, epochs=1, lr=cfg["lr"])
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"train_loss": train_loss, "num-examples": len(trainloader.dataset)})})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def client_evaluate(msg: Message, context: Context):
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    _, loader = load_data(context.node_config["partition-id"])
    loss, acc = evaluate_loader(model, loader)
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": acc, "num-examples": len(loader.dataset)})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)


def test_quickstart_shaped_app_runs_dfedcata_and_learns():
    torch.manual_seed(0)
    grid = InProcessGrid(app, NUM_NODES)
    # server_app.py: FedAvg(fraction_train=...) -> DFedCata(...), the rest of main() unchanged
    strategy = DFedCata(beta=0.9, lam=0.05, topology="random", neighbours=3,
                        on_train_config_fn=lambda r: {"lr": 0.1})
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()), num_rounds=4)
    assert strategy.core.num_partitions == NUM_NODES
    accs = [result.evaluate_metrics_clientapp[r]["eval_acc"] for r in sorted(result.evaluate_metrics_clientapp)]
    assert len(accs) == 4 and accs[-1] > accs[0] - 0.05 and accs[-1] > 0.5
    # the final model is the peers' network average, in the user's state_dict naming
    assert list(result.arrays.keys()) == list(Net().state_dict().keys())
    assert all(np.isfinite(a).all() for a in result.arrays.to_numpy_ndarrays())
    train_losses = [result.train_metrics_clientapp[r]["train_loss"] for r in sorted(result.train_metrics_clientapp)]
    assert train_losses[-1] < train_losses[0]
