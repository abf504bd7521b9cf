"""pytorchexample: A Flower / PyTorch app (legacy API)."""

import torch
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import ServerApp, ServerAppComponents, ServerConfig
from flwr.server.strategy import FedAvg

from pytorchexample.task import Net, get_weights, load_centralized_dataset, set_weights, test


def fit_config(server_round: int):
    """Per-round client config."""
    return {"lr": LR}


def global_evaluate(server_round, parameters, config):
    """Evaluate the global model on central data."""
    model = Net()
    set_weights(model, parameters)
    loss, accuracy = test(model, load_centralized_dataset(), torch.device("cpu"))
    print(f"CENTRAL round={server_round} accuracy={accuracy:.4f} loss={loss:.4f}")
    return loss, {"accuracy": accuracy}


LR = 0.1


def server_fn(context: Context):
    """Build the strategy and the server config."""
    global LR
    LR = context.run_config["learning-rate"]
    num_rounds = context.run_config["num-server-rounds"]
    fraction_evaluate = context.run_config["fraction-evaluate"]

    torch.manual_seed(0)
    parameters = ndarrays_to_parameters(get_weights(Net()))

    strategy = FedAvg(
        fraction_fit=1.0,
        fraction_evaluate=fraction_evaluate,
        initial_parameters=parameters,
        on_fit_config_fn=fit_config,
        evaluate_fn=global_evaluate,
    )
    config = ServerConfig(num_rounds=num_rounds)
    return ServerAppComponents(strategy=strategy, config=config)


# Create ServerApp
app = ServerApp(server_fn=server_fn)
