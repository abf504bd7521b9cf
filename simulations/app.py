"""The Flower app (``[tool.flwr.app.components]``) for ``flwr run .`` and real deployments.

Run config keys (``[tool.flwr.app.config]`` or ``flwr run . --run-config "k=v ..."``): ``method``,
``dataset``, ``num-clients``, ``num-server-rounds``, ``seed``, ``partition``, ``alpha``, ``lr``,
``local-epochs``, ``batch-size``, ``data-dir``, ``set`` (method hyperparameters as
``"key=value,key=value"``) and ``out-dir`` (when non-empty, the ServerApp writes
``<out-dir>/results.json`` after every evaluation: the runner's results format, rounds so far).
Each SuperNode must be given its ``partition-id`` (and ``num-partitions``) through
``--node-config``; Flower's simulation engine does that itself.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from flwr.client import Client, ClientApp
from flwr.common import Context, Parameters, Scalar
from flwr.server import ServerApp, ServerAppComponents
from flwr.server.client_manager import ClientManager
from flwr.server.strategy import Strategy

from flwr_strategies.metering import MeteredStrategy

from .experiment import ExperimentConfig, get_experiment
from .results import summarize, write_json

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


class ResultsWriter(Strategy):
    """Delegate everything to a :class:`MeteredStrategy`; after every central or federated
    evaluation write ``<out_dir>/results.json`` (``method``, ``config``, ``summary``, ``rounds``),
    so a ServerApp run by a SuperLink leaves its numbers where the caller can read them.

    Parameters
    ----------
    metered : MeteredStrategy
        The wrapped (metered) strategy of the run.
    cfg : ExperimentConfig
        The run's experiment settings (written into the file).
    out_dir : str
        Folder to write ``results.json`` into; created if missing.
    """

    def __init__(self, metered: MeteredStrategy, cfg: ExperimentConfig, out_dir: str) -> None:
        super().__init__()
        self.metered = metered
        self.cfg = cfg
        self.out_dir = Path(out_dir)
        self._t0 = time.perf_counter()

    def snapshot(self) -> list[dict[str, Any]]:
        """Finished round records plus the round in progress (private timing keys dropped)."""
        rounds = list(self.metered.rounds)
        current = getattr(self.metered, "_current", None)
        if current is not None:
            rounds.append({k: v for k, v in current.items() if not k.startswith("_")})
        return rounds

    def write(self) -> None:
        rounds = self.snapshot()
        write_json(
            self.out_dir / "results.json",
            {
                "method": self.cfg.method,
                "label": self.cfg.method,
                "seed": self.cfg.seed,
                "config": self.cfg.to_dict(),
                "runtime": "flwr run (ServerApp)",
                "timing": {"wall_s": time.perf_counter() - self._t0},
                "summary": summarize(rounds),
                "failure_log": self.metered.failure_log,
                "rounds": rounds,
            },
        )

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return self.metered.initialize_parameters(client_manager)

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        return self.metered.configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(self, server_round: int, results, failures):
        return self.metered.aggregate_fit(server_round, results, failures)

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        return self.metered.configure_evaluate(server_round, parameters, client_manager)

    def aggregate_evaluate(self, server_round: int, results, failures):
        res = self.metered.aggregate_evaluate(server_round, results, failures)
        self.write()
        return res

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        res = self.metered.evaluate(server_round, parameters)
        self.write()
        return res


def _server_fn(context: Context) -> ServerAppComponents:
    from .backends import ServerFactory

    cfg = config_from_run_config(context.run_config)
    components = ServerFactory(cfg)(context)
    out_dir = str(context.run_config.get("out-dir", "") or "")
    if out_dir:
        components.strategy = ResultsWriter(components.strategy, cfg, out_dir)
    return components


def _client_fn(context: Context) -> Client:
    cfg = config_from_run_config(context.run_config)
    n = int(context.node_config.get("num-partitions", cfg.num_clients))
    if n != cfg.num_clients:
        raise ValueError(f"node_config num-partitions={n} but the run config has num-clients={cfg.num_clients}")
    return get_experiment(cfg).make_client(context)


server_app = ServerApp(server_fn=_server_fn)
client_app = ClientApp(client_fn=_client_fn)
