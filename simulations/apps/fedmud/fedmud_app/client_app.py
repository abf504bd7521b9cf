"""fedmud_app: the ClientApp, a FedMUD client (Sec. 3: model update decomposition).

``FedMUDRound`` re-parametrises the compressed layers of the received model as ``W_base + dW``, where
``dW`` is built from small block-wise Kronecker factors (Sec. 3.2) in the aggregation-aware form
(Sec. 3.3); the client trains only the factors (and the dense layers) with plain SGD and replies
with them: about 1/32 of the model (Sec. 5.1). ``W_base`` stays on the node (``context.state``)
and is rebuilt from the averaged factors at every reset. ``partition-id`` and ``num-partitions``
come from the node config, in simulation (Flower sets them) and in deployment
(``flower-supernode --node-config "partition-id=0 num-partitions=10"``).
"""

import torch
import torch.nn.functional as F
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr_strategies.clients.app import message_config, partition_query
from flwr_strategies.clients.fedmud import FedMUDRound

from fedmud_app.task import Net, load_partition

app = ClientApp()
app.query("partition")(partition_query)  # the strategy learns which partition this node holds


@app.train()
def train(msg: Message, context: Context) -> Message:
    """``local-epochs`` epochs of SGD on the decomposed update (Sec. 5.1: lr 0.01, batch 64)."""
    run = context.run_config
    pid, parts = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    server_round = int(message_config(msg)["server-round"])
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    model = Net()
    mud = FedMUDRound.from_message(model, msg, context)  # instead of model.load_state_dict(...)
    model.to(device)
    loader = load_partition(pid, parts, run, seed=int(run["seed"]) * 100_003 + server_round * 1_009 + pid)
    optimizer = torch.optim.SGD(model.parameters(), lr=float(run["lr"]))  # built after the wrapping
    model.train()
    total, steps = 0.0, 0
    for _ in range(int(run["local-epochs"])):
        for batch in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch["x"].to(device)), batch["y"].to(device))
            loss.backward()
            optimizer.step()
            total, steps = total + loss.item(), steps + 1
    model.cpu()
    return mud.reply(msg, context, len(loader.dataset), {"train_loss": total / max(steps, 1)})
