"""fedli_app: the ClientApp, a FedLi-LS client (Alg. 1 ClientUpdate; App. A.1).

It trains the received global model for ``local-epochs`` epochs of SGD whose step size a
stochastic Armijo line search picks on every minibatch (``ArmijoSGD``; no learning rate to tune),
and replies with its model, its data size and the step size of its last local step.
``partition-id`` and ``num-partitions`` come from the node config, in simulation (Flower sets them)
and in deployment (``flower-supernode --node-config "partition-id=0 num-partitions=10"``).
"""

import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, Context, Message
from flwr.clientapp import ClientApp
from flwr_strategies.clients.app import message_config, partition_query, train_reply
from flwr_strategies.clients.fedli import ArmijoConfig, ArmijoSGD

from fedli_app.task import load_partition, make_model

app = ClientApp()
app.query("partition")(partition_query)  # the strategy learns which partition this node holds


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One local run of Armijo-SGD from the global model."""
    config, run = message_config(msg), context.run_config
    pid, parts = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    server_round = int(config["server-round"])
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    model = make_model(str(run["model"]))
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    model.to(device)
    seed = int(run["seed"]) * 100_003 + server_round * 1_009 + pid
    loader = load_partition(pid, parts, run, seed=seed)
    # the strategy sends the line-search constants (eta_max, c, backtracking factor) every round
    optimizer = ArmijoSGD(model.parameters(), ArmijoConfig.from_mapping(config), batch_fraction=1 / len(loader),
                          generator=torch.Generator().manual_seed(seed))
    model.train()
    total, steps = 0.0, 0
    for _ in range(int(run["local-epochs"])):
        for batch in loader:
            x, y = batch["x"].to(device), batch["y"].to(device)
            total += float(optimizer.step(lambda: F.cross_entropy(model(x), y)))
            steps += 1
    return train_reply(msg, context, ArrayRecord(model.cpu().state_dict()), len(loader.dataset),
                       {"train_loss": total / max(steps, 1), "step_size": optimizer.step_size})
