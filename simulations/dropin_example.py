"""How to drop one of this project's methods into an *existing* Flower app (legacy API).

``docs/deployment.md`` quotes this file; ``tests/test_deployment_dropin.py`` runs it, so the
recipe cannot rot. The "existing app" here is a toy: a linear model on random data that every
client generates from its ``partition-id``. Replace ``make_model`` / ``load_partition`` /
``central_evaluate`` with your own; the four lines that matter are marked ``# <--``.

Any registered method name works (``python -m simulations list``): e.g. ``"fedavg"``,
``"fedprox"``, ``"dfedcata"``, ``"fedmud"``, ...
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.client import ClientApp
from flwr.common import Context
from flwr.compat.server import ServerAppComponents
from flwr.server import ServerApp, ServerConfig

from flwr_strategies.clients.store import client_state_mod
from flwr_strategies.clients.training import TensorData, evaluate_model, get_weights, set_weights
from flwr_strategies.registry import get_method, resolve_params  # <-- the import
from flwr_strategies.sampling import PartitionClientManager
from flwr_strategies.setup import ClientSetup, ServerSetup, TrainConfig

METHOD = "fedavg"  # any registered method
NUM_CLIENTS = 3
NUM_ROUNDS = 3
SEED = 0
TRAIN = TrainConfig(lr=0.1, local_epochs=1, batch_size=32)


# ---- the existing app's own pieces --------------------------------------------------------
def make_model() -> torch.nn.Module:
    torch.manual_seed(SEED)
    return torch.nn.Linear(8, 2)


def _data(seed: int, n: int) -> TensorData:
    g = np.random.default_rng(seed)
    x = g.normal(size=(n, 8)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    return TensorData(torch.from_numpy(x), torch.from_numpy(y))


def load_partition(partition_id: int) -> TensorData:
    return _data(100 + partition_id, 200)


_TEST = _data(99, 500)


def central_evaluate(server_round: int, arrays: list[np.ndarray], config: dict) -> tuple[float, dict]:
    model = make_model()
    set_weights(model, arrays)
    loss, acc = evaluate_model(model, _TEST)
    return loss, {"accuracy": acc}


# ---- server side ----------------------------------------------------------------------------
def fit_config(server_round: int) -> dict:
    return {"server-round": server_round, "lr": TRAIN.lr_at(server_round), "local_epochs": 1,
            "local_steps": 0, "batch_size": TRAIN.batch_size, "seed": SEED}


def server_fn(context: Context) -> ServerAppComponents:
    spec = get_method(METHOD)
    params = resolve_params(spec, {})  # method hyperparameters, e.g. {"proximal_mu": 0.01}
    setup = ServerSetup(initial_parameters=get_weights(make_model()), evaluate_fn=central_evaluate,
                        num_clients=NUM_CLIENTS, fraction_fit=1.0, num_rounds=NUM_ROUNDS, seed=SEED, train=TRAIN,
                        model_fn=make_model, fit_config=fit_config)
    strategy = spec.legacy_strategy(setup, params)  # <-- the constructor (a legacy flwr Strategy)
    return ServerAppComponents(
        strategy=strategy,
        config=ServerConfig(num_rounds=NUM_ROUNDS),
        client_manager=PartitionClientManager(NUM_CLIENTS, seed=SEED),  # seeded, waits for all
    )


# ---- client side ----------------------------------------------------------------------------
def client_fn(context: Context):
    spec = get_method(METHOD)
    pid = int(context.node_config["partition-id"])
    setup = ClientSetup(
        partition_id=pid,
        num_partitions=int(context.node_config.get("num-partitions", NUM_CLIENTS)),
        model=make_model(),
        train_data=load_partition(pid),
        test_data=None,
        train=TRAIN,
        device=torch.device("cpu"),
        seed=SEED,
        state=context.state,  # per-client state that survives rounds (methods that need it)
    )
    return spec.build_client(setup, resolve_params(spec, {})).to_client()  # <-- the matching client


server_app = ServerApp(server_fn=server_fn)  # <-- [tool.flwr.app.components] serverapp
# the mod keeps a stateful method's client state (SCAFFOLD's c_i, FedMUD's W_base, DO-ADP's agent) on the node
# across Flower runs, so a run resumed from the strategy's checkpoint continues exactly (docs/checkpoints.md)
client_app = ClientApp(client_fn=client_fn, mods=[client_state_mod])  # <-- [tool.flwr.app.components] clientapp
