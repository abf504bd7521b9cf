"""Message-API front end (``flwr.serverapp.strategy`` + ``ClientApp`` with ``@app.train()``).

A thin adapter over the same algorithm core as the legacy path:

- :class:`MessageFedAvg` is Flower's Message-API ``FedAvg`` whose aggregation is the legacy core
  (``flwr.server.strategy.aggregate.aggregate_inplace``, what the legacy ``FedAvg`` uses) applied to
  the replies sorted by ``partition-id`` (what :class:`~flwr_strategies.metering.MeteredStrategy`
  does), so both APIs give bit-identical models on the same seed.
- :func:`make_client_app` wraps any registered method's ``NumPyClient`` (built exactly as on the
  legacy path) in ``@app.train()`` / ``@app.evaluate()`` handlers: arrays in, the client's
  ``fit``/``evaluate``, arrays and metrics out. The round's client config is the experiment's
  standard ``fit_config(server-round)`` updated with the message's ``ConfigRecord``.
- :func:`make_server_app` / :func:`run_message`: ``strategy.start(...)`` with central
  evaluation on the experiment's test set.

Covered so far: FedAvg (McMahan et al., AISTATS 2017) and FedProx (Li et al., MLSys 2020), see
:data:`MESSAGE_METHODS`; the other methods keep their legacy strategies.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import uuid4

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg, FedProx
from flwr.server.strategy.aggregate import aggregate_inplace

PARTITION_KEY = "partition-id"
WEIGHT_KEY = "num-examples"


def _numeric(metrics: dict[str, Any]) -> dict[str, int | float]:
    """The int/float entries of ``metrics`` (a ``MetricRecord`` holds numbers only)."""
    out: dict[str, int | float] = {}
    for k, v in (metrics or {}).items():
        if isinstance(v, (bool, np.bool_)):
            out[k] = int(v)
        elif isinstance(v, (int, np.integer)):
            out[k] = int(v)
        elif isinstance(v, (float, np.floating)):
            out[k] = float(v)
    return out


class LegacyAggregationMixin:
    """``aggregate_train`` of the legacy ``FedAvg`` family for a Message-API ``FedAvg`` subclass.

    Replies are sorted by their ``partition-id`` metric and averaged with
    ``aggregate_inplace`` weighted by ``num-examples``, exactly as the legacy ``FedAvg`` does
    behind :class:`~flwr_strategies.metering.MeteredStrategy`. All constructor arguments are
    Flower's ``FedAvg`` ones (``fraction_train`` in (0, 1], ``min_train_nodes`` >= 1,
    ``min_available_nodes`` >= 1, ...); set ``min_train_nodes = min_available_nodes = N`` for full
    participation (avoids Flower's round-1 under-sampling race).
    """

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        valid, _ = self._check_and_log_replies(replies, is_train=True)
        if not valid:
            return None, None
        valid = sorted(valid, key=lambda m: int(m.content["metrics"].get(PARTITION_KEY, 0)))
        results = [
            (
                None,
                FitRes(
                    status=Status(Code.OK, ""),
                    parameters=ndarrays_to_parameters(m.content["arrays"].to_numpy_ndarrays()),
                    num_examples=int(m.content["metrics"][self.weighted_by_key]),
                    metrics={},
                ),
            )
            for m in valid
        ]
        arrays = ArrayRecord(aggregate_inplace(results))  # type: ignore[arg-type]
        metrics = self.train_metrics_aggr_fn([m.content for m in valid], self.weighted_by_key)
        return arrays, metrics


class MessageFedAvg(LegacyAggregationMixin, FedAvg):
    """FedAvg (McMahan et al., AISTATS 2017) on the Message API: Flower's ``FedAvg`` with the
    legacy aggregation core (see :class:`LegacyAggregationMixin`); same arguments as Flower's."""


class MessageFedProx(LegacyAggregationMixin, FedProx):
    """FedProx (Li et al., MLSys 2020) on the Message API: Flower's ``FedProx`` (sends
    ``proximal-mu``, >= 0, default 0) with the legacy aggregation core."""


def make_client_app(cfg: Any) -> ClientApp:
    """A Message-API ``ClientApp`` running the method of ``cfg`` (an ``ExperimentConfig``).

    The node's partition comes from ``context.node_config["partition-id"]``; per-client state
    lives in ``context.state`` as on the legacy path.
    """
    from flwr_strategies.simulations.experiment import get_experiment

    app = ClientApp()

    def _config(exp: Any, msg: Message) -> dict[str, Any]:
        received = dict(msg.content["config"]) if "config" in msg.content else {}
        rnd = int(received.pop("server-round", received.get("server_round", 0)))
        # Message-API keys use hyphens ("proximal-mu"); the legacy clients read underscores
        return {**exp.fit_config(rnd), **{k.replace("-", "_"): v for k, v in received.items()}}

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        exp = get_experiment(cfg)
        config = _config(exp, msg)
        with exp.borrowed_model() as model:
            client = exp.build_client(context, model)
            weights, n, metrics = client.fit(msg.content["arrays"].to_numpy_ndarrays(), config)
        out = {**_numeric(metrics), WEIGHT_KEY: int(n)}
        out[PARTITION_KEY] = int(context.node_config["partition-id"])
        return Message(RecordDict({"arrays": ArrayRecord(weights), "metrics": MetricRecord(out)}), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        exp = get_experiment(cfg)
        config = _config(exp, msg)
        with exp.borrowed_model() as model:
            client = exp.build_client(context, model)
            loss, n, metrics = client.evaluate(msg.content["arrays"].to_numpy_ndarrays(), config)
        out = {**_numeric(metrics), "loss": float(loss), WEIGHT_KEY: int(n)}
        return Message(RecordDict({"metrics": MetricRecord(out)}), reply_to=msg)

    return app


MESSAGE_METHODS = ("fedavg", "fedprox")


def build_message_strategy(cfg: Any, params: dict[str, Any]) -> FedAvg:
    """The Message-API strategy of ``cfg.method`` (one of :data:`MESSAGE_METHODS`), full participation."""
    common = dict(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=cfg.num_clients,
                  min_evaluate_nodes=0, min_available_nodes=cfg.num_clients)
    if cfg.method == "fedavg":
        return MessageFedAvg(**common)
    if cfg.method == "fedprox":
        return MessageFedProx(proximal_mu=float(params["proximal_mu"]), **common)
    raise ValueError(f"no Message-API front end for method {cfg.method!r}; available: {', '.join(MESSAGE_METHODS)}")


def run_message(cfg: Any, grid: Grid) -> tuple[Any, list[dict[str, Any]]]:
    """Run ``cfg`` (method in :data:`MESSAGE_METHODS`) on ``grid``; full participation only.

    Returns Flower's ``Result`` and per-round records ``{"round", "accuracy", "loss"}`` of the
    central evaluation (round 0 = initial model).
    """
    from flwr_strategies.simulations.experiment import get_experiment

    cfg = cfg.resolve()  # unset settings take the method's defaults
    if cfg.fraction_fit != 1.0:
        raise ValueError(f"run_message needs fraction_fit=1.0, got {cfg.fraction_fit}")
    exp = get_experiment(cfg)
    history: list[dict[str, Any]] = []

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        loss, metrics = exp.evaluate_fn(server_round, arrays.to_numpy_ndarrays(), {})
        history.append({"round": server_round, "loss": float(loss), "accuracy": float(metrics["accuracy"])})
        return MetricRecord({"loss": float(loss), **_numeric(metrics)})

    strategy = build_message_strategy(cfg, exp.params)
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord([a.copy() for a in exp.initial_parameters]),
        num_rounds=cfg.rounds,
        evaluate_fn=evaluate_fn,
    )
    return result, history


def make_server_app(cfg: Any) -> ServerApp:
    """A Message-API ``ServerApp`` (``@app.main()``) running :func:`run_message`."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_message(cfg, grid)

    return app


def __getattr__(name):
    if name == "InProcessGrid":  # moved to the simulation layer
        from flwr_strategies.simulations.inprocess_grid import InProcessGrid

        return InProcessGrid
    raise AttributeError(name)
