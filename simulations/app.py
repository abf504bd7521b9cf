"""The Flower app (``[tool.flwr.app.components]``) for ``flwr run .`` and real deployments.

Run config keys (``[tool.flwr.app.config]`` or ``flwr run . --run-config "k=v ..."``): ``method``,
``dataset``, ``num-clients``, ``num-server-rounds``, ``seed``, ``partition``, ``alpha``, ``lr``,
``local-epochs``, ``batch-size``, ``data-dir``, and ``set`` (method hyperparameters as
``"key=value,key=value"``). Each SuperNode must be given its ``partition-id`` (and
``num-partitions``) through ``--node-config``; Flower's simulation engine does that itself.
"""

from __future__ import annotations

import os
from typing import Any

from flwr.client import Client, ClientApp
from flwr.common import Context
from flwr.server import ServerApp, ServerAppComponents

from .experiment import ExperimentConfig, get_experiment

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")


def config_from_run_config(run_config: dict[str, Any]) -> ExperimentConfig:
    """Map Flower run-config keys onto an :class:`ExperimentConfig`."""
    rc = dict(run_config)
    params = {}
    for item in str(rc.get("set", "") or "").split(","):
        if item.strip():
            k, v = item.split("=", 1)
            params[k.strip()] = v.strip()
    return ExperimentConfig(
        method=str(rc.get("method", "fedavg")),
        dataset=str(rc.get("dataset", "digits")),
        data_dir=str(rc.get("data-dir") or "") or None,
        num_clients=int(rc.get("num-clients", 10)),
        rounds=int(rc.get("num-server-rounds", 20)),
        seed=int(rc.get("seed", 0)),
        partition=str(rc.get("partition", "iid")) or None,
        alpha=float(rc.get("alpha", 0.5)),
        lr=float(rc.get("lr", 0.1)),
        local_epochs=int(rc.get("local-epochs", 1)),
        batch_size=int(rc.get("batch-size", 32)),
        params=params,
        progress=False,
    )


def _server_fn(context: Context) -> ServerAppComponents:
    from .backends import ServerFactory

    return ServerFactory(config_from_run_config(context.run_config))(context)


def _client_fn(context: Context) -> Client:
    cfg = config_from_run_config(context.run_config)
    n = int(context.node_config.get("num-partitions", cfg.num_clients))
    if n != cfg.num_clients:
        raise ValueError(f"node_config num-partitions={n} but the run config has num-clients={cfg.num_clients}")
    return get_experiment(cfg).make_client(context)


server_app = ServerApp(server_fn=_server_fn)
client_app = ClientApp(client_fn=_client_fn)
