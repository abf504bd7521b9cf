"""doadp_app: the ClientApp, one DO-ADP agent (Alg. 1, one iteration per round).

Each round the agent activates with probability p; an active agent takes one momentum-SGD step on a
minibatch of its own data with per-sample clipped, Gaussian-noised gradients, moves towards the
consensus term the strategy sent, and replies with the Top-k entries of its model minus its public
copy (error feedback keeps the rest for later rounds). Its private model, momentum and public copy
stay on the node (``context.state``).

The agent owns its privacy (Sec. IV): it checks the noise the strategy proposes against its own
budget and refuses a round that would spend more. The budget comes from the SuperNode's node config
(``doadp-epsilon``, ``doadp-rounds``, optional ``doadp-delta`` and ``doadp-clip``) or, where the node
sets none (a simulation), this app's own: epsilon = 1 (Sec. VI-B, Fig. 4) over the run's rounds. The
coin, the minibatches and the noise come from OS entropy or the node's own ``doadp-client-seed``,
never from the server. ``partition-id`` and ``num-partitions`` come from the node config, in
simulation (Flower sets them) and in deployment.
"""

import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr_strategies.clients.app import message_config, partition_query, train_reply
from flwr_strategies.clients.doadp import ClientBudget, DOADPAgent, IndexedData, client_budget_of

from doadp_app.task import Net, load_partition

#: This app's privacy budget where the SuperNode's node config sets none (Sec. VI-B: epsilon = 1).
APP_EPSILON = 1.0

app = ClientApp()
app.query("partition")(partition_query)  # the strategy learns which agent of the graph this node is


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One private DO-ADP iteration on the local data."""
    run = context.run_config
    pid, parts = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    budget = client_budget_of(node_config=context.node_config) or ClientBudget(
        epsilon=APP_EPSILON, rounds=int(run["num-server-rounds"]))
    agent = DOADPAgent(msg.content["arrays"].to_numpy_ndarrays(), message_config(msg), context.state,
                       node_config=context.node_config, budget=budget)
    loader = load_partition(pid, parts, run)
    if len(loader.dataset) != int(run["local-dataset-size"]):
        raise ValueError(f"run config local-dataset-size={run['local-dataset-size']} but partition {pid} of {parts} "
                         f"holds {len(loader.dataset)} records: the noise would be calibrated for the wrong q")
    model = Net().to(torch.device("cuda:0" if torch.cuda.is_available() else "cpu"))
    arrays, metrics = agent.train(model, IndexedData(loader, keys=("x", "y")))
    reply = train_reply(msg, context, arrays, len(loader.dataset), metrics)
    agent.save(context.state)  # commit the agent's state once the reply exists
    return reply
