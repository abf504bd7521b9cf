"""fedmezo_app: the ClientApp, a FedMeZO client (Sec. 2.2, Eq. 3; Alg. 1 of the paper).

It loads the global LoRA adapters the strategy sent and runs H steps of MeZO on them: each step
perturbs the adapters by ``+mu z`` and ``-mu z`` (``z`` regenerated from a seed, never stored), takes
the two losses on the same minibatch with no backward pass, and moves the adapters by
``-lr (L+ - L-) / (2 mu) z``. Memory stays close to inference. It replies with the adapters.
``partition-id`` and ``num-partitions`` come from the node config, in simulation (Flower sets them)
and in deployment (``flower-supernode --node-config "partition-id=0 num-partitions=3"``).
"""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr_strategies.clients.app import message_config, partition_query, train_reply
from flwr_strategies.clients.fedmezo import MeZO, load_trainable_arrays, round_batches, round_steps, trainable_arrays

from fedmezo_app.task import load_model, load_partition

app = ClientApp()
app.query("partition")(partition_query)  # the strategy learns which partition this node holds


@app.train()
def train(msg: Message, context: Context) -> Message:
    """H MeZO steps on the LoRA adapters (lr, mu, H, batch size and the step seeds from the strategy)."""
    config, run = message_config(msg), context.run_config
    pid, parts = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    model, _ = load_model(run)
    data = load_partition(pid, parts, run)
    load_trainable_arrays(model, msg.content["arrays"].to_numpy_ndarrays())  # the global adapters
    optimizer = MeZO.from_config(model, config, pid)
    batch_size = int(config["batch_size"])
    steps = round_steps(config, data, batch_size)
    losses = []
    for batch in round_batches(data, steps, batch_size, run_seed=int(run["seed"]),
                               server_round=int(config["server-round"]), partition_id=pid):
        losses.append(float(optimizer.step(lambda: model(**batch).loss)))  # two forward passes, no backward
    return train_reply(msg, context, trainable_arrays(model), steps * batch_size,
                       {"train_loss": sum(losses) / len(losses)})
