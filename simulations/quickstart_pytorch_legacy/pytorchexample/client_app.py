"""pytorchexample: A Flower / PyTorch app (legacy API)."""

import torch
from flwr.client import ClientApp, NumPyClient
from flwr.common import Context

from pytorchexample.task import Net, get_weights, load_data, set_weights, test, train


class FlowerClient(NumPyClient):
    """The user's NumPyClient."""

    def __init__(self, net, trainloader, valloader, local_epochs, context):
        self.net = net
        self.trainloader = trainloader
        self.valloader = valloader
        self.local_epochs = local_epochs
        self.context = context
        self.device = torch.device("cpu")

    def fit(self, parameters, config):
        set_weights(self.net, parameters)
        train_loss = train(self.net, self.trainloader, self.local_epochs, config["lr"], self.device)
        return get_weights(self.net), len(self.trainloader.dataset), {"train_loss": train_loss}

    def evaluate(self, parameters, config):
        set_weights(self.net, parameters)
        loss, accuracy = test(self.net, self.valloader, self.device)
        return loss, len(self.valloader.dataset), {"accuracy": accuracy}


def client_fn(context: Context):
    """Build the client of this node."""
    net = Net()
    partition_id = context.node_config["partition-id"]
    num_partitions = context.node_config["num-partitions"]
    trainloader, valloader = load_data(partition_id, num_partitions, context.run_config["batch-size"])
    local_epochs = context.run_config["local-epochs"]
    return FlowerClient(net, trainloader, valloader, local_epochs, context).to_client()


# Flower ClientApp
app = ClientApp(client_fn=client_fn)
