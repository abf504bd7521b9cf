"""Run one registered method through both Flower APIs in this process, and resume from checkpoints.

Both paths build the method's core from the same experiment (``MethodSpec.build_core``) and run
the method's ready-made client; only the Flower API in between differs:

- legacy: Flower's ``Server`` + the method's :class:`~flwr_strategies.adapters.LegacyStrategy` and
  in-process client proxies (``NumPyClient``);
- message: the method's Message-API strategy (Flower's ``start()``) on an
  :class:`~flwr_strategies.simulations.inprocess_grid.InProcessGrid` running
  :func:`flwr_strategies.clients.app.numpy_client_app`.

Each returns ``[(round, loss, accuracy_or_None), ...]`` from central evaluation (round 0 included).
Pass the returned ``clients`` (proxies or grid) back in to keep the clients' ``context.state``
when resuming from a ``state`` (a ``state_dict()``).
"""

from __future__ import annotations

from typing import Any

from flwr.app import ArrayRecord, MetricRecord
from flwr.server import Server

from flwr_strategies.clients.app import numpy_client_app
from flwr_strategies.sampling import PartitionClientManager
from flwr_strategies.simulations.backends import InProcessClientProxy
from flwr_strategies.simulations.experiment import ClientFactory, ExperimentConfig, get_experiment
from flwr_strategies.simulations.inprocess_grid import InProcessGrid

Record = tuple[int, float, Any]


def _records(history) -> list[Record]:
    return [(r["round"], r["loss"], r.get("accuracy")) for r in history.rounds if r.get("loss") is not None]


def legacy_run(cfg: ExperimentConfig, *, rounds: int | None = None, state: dict | None = None,
               clients: list | None = None) -> tuple[list[Record], Any, list]:
    """Rounds ``1..rounds`` (default ``cfg.rounds``), or the rounds after ``state``, on the legacy API."""
    cfg = cfg.resolve()  # unset settings take the method's paper defaults, as in every run
    exp = get_experiment(cfg)
    strategy = exp.spec.legacy_strategy(exp.server_setup(), dict(exp.params))
    if state is not None:
        strategy.load_state_dict(state)
    manager = PartitionClientManager(cfg.num_clients, seed=cfg.seed)
    factory = ClientFactory(cfg)
    clients = clients or [InProcessClientProxy(pid, cfg.num_clients, factory) for pid in range(cfg.num_clients)]
    for proxy in clients:
        manager.register(proxy)
    server = Server(client_manager=manager, strategy=strategy)
    server.set_max_workers(1)
    done = int(state["server_round"]) if state is not None else 0
    server.fit(num_rounds=(rounds or cfg.rounds) - done, timeout=None)
    strategy.history.finalize()
    return _records(strategy.history), strategy, clients


def message_run(cfg: ExperimentConfig, *, rounds: int | None = None, state: dict | None = None,
                clients: InProcessGrid | None = None) -> tuple[list[Record], Any, InProcessGrid]:
    """The same on the Message API (``strategy.start``), with central evaluation."""
    cfg = cfg.resolve()
    exp = get_experiment(cfg)

    models: list = []

    def client_fn(context):  # the grid calls one client at a time: one model object serves them all
        if not models:
            models.append(exp.model_fn())
        return exp.build_client(context, models[0])

    grid = clients or InProcessGrid(numpy_client_app(client_fn), cfg.num_clients)
    strategy = exp.spec.message_strategy(exp.server_setup(), dict(exp.params))

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        loss, metrics = exp.evaluate_fn(server_round, arrays.to_numpy_ndarrays(), {})
        return MetricRecord({"loss": float(loss), **{k: float(v) for k, v in metrics.items()}})

    done = 0
    if state is not None:
        strategy.load_state_dict(state)
        done = int(state["server_round"])
    strategy.start(grid=grid, initial_arrays=ArrayRecord([a.copy() for a in exp.initial_parameters]),
                   num_rounds=(rounds or cfg.rounds) - done, evaluate_fn=strategy.central_evaluation(evaluate_fn))
    strategy.history.finalize()
    return _records(strategy.history), strategy, grid


def assert_same_records(a: list[Record], b: list[Record]) -> None:
    """Bit-identical per-round losses and accuracies."""
    assert [r[0] for r in a] == [r[0] for r in b], (a, b)
    for x, y in zip(a, b):
        assert x == y, f"round {x[0]}: {x} != {y}"
