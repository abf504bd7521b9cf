"""dfedcata_app: the ClientApp, a peer of DFedCata (arXiv:2410.07272, Algorithm 1 lines 5-7).

The strategy sends each peer its extrapolated start point ``x_0`` and ``config["lam"]``; the peer runs
K local epochs of SGD on ``f_i(x) + lam/2 ||x - x_0||^2`` (the Moreau envelope) and replies with its
model. ``partition-id`` and ``num-partitions`` come from the node config, in simulation (Flower sets
them) and in deployment (``flower-supernode --node-config "partition-id=0 num-partitions=10"``).
"""

import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, Context, Message
from flwr.clientapp import ClientApp
from flwr_strategies.clients.app import partition_query, train_reply
from flwr_strategies.clients.dfedcata import LocalSGD, MoreauEnvelope

from dfedcata_app.task import Net, load_partition

app = ClientApp()
app.query("partition")(partition_query)  # the strategy learns which peer of the graph this node is


@app.train()
def train(msg: Message, context: Context) -> Message:
    """K local epochs on the Moreau envelope around the received start point."""
    config, run = msg.content["config"], context.run_config
    pid, parts = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    server_round = int(config["server-round"])
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    model.to(device)
    # App. A-A: lr 0.1 decayed x0.998 per communication round
    lr = float(run["lr"]) * float(run["lr-decay"]) ** (server_round - 1)
    optimizer = LocalSGD(model.parameters(), lr=lr, weight_decay=float(run["weight-decay"]),
                         clip_norm=float(run["grad-clip"]), moreau=MoreauEnvelope(model, lam=float(config["lam"])))
    loader = load_partition(pid, parts, run, seed=int(run["seed"]) * 100_003 + server_round * 1_009 + pid)
    model.train()
    total, steps = 0.0, 0
    for _ in range(int(run["local-epochs"])):
        for batch in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch["x"].to(device)), batch["y"].to(device))
            loss.backward()
            optimizer.step()
            total, steps = total + loss.item(), steps + 1
    return train_reply(msg, context, ArrayRecord(model.cpu().state_dict()), len(loader.dataset),
                       {"train_loss": total / max(steps, 1)})
