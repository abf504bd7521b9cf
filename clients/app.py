"""Message-API client side, generic over every method: ``ClientApp`` handlers around a NumPyClient.

- :func:`partition_query`: answers the strategies' ``query.partition`` message with the node's
  ``partition-id`` (and ``num-partitions``). Register it in your own ClientApp with one line::

      app.query("partition")(partition_query)

- :func:`numpy_client_app`: a complete ``ClientApp`` (``@app.train()``, ``@app.evaluate()``,
  ``@app.query("partition")``) running any legacy ``NumPyClient`` built by ``client_fn(context)``.
  The ready-made clients of every method go through it, so the Message API and the legacy API run
  the same client code and give the same numbers. Its train handler keeps the client's state on the
  node across Flower runs (:mod:`flwr_strategies.clients.store`), so a resumed run continues exactly.
- :func:`reply_config` / :func:`train_reply`: small helpers for hand-written handlers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flwr_strategies.common import PARTITION_KEY
from flwr_strategies.core.messages import numeric_metrics

from .store import client_state_mod

__all__ = ["partition_query", "numpy_client_app", "message_config", "train_reply", "PARTITION_KEY"]
WEIGHT_KEY = "num-examples"


def partition_query(msg: Message, context: Context) -> Message:
    """Reply to ``query.partition`` with this node's ``partition-id`` and ``num-partitions``."""
    cfg = context.node_config
    if PARTITION_KEY not in cfg:
        raise KeyError(f"node_config has no '{PARTITION_KEY}'; start the SuperNode with --node-config 'partition-id=...'")
    out = {PARTITION_KEY: int(cfg[PARTITION_KEY])}
    if "num-partitions" in cfg:
        out["num-partitions"] = int(cfg["num-partitions"])
    return Message(RecordDict({"metrics": MetricRecord(out)}), reply_to=msg)


def message_config(msg: Message, key: str = "config") -> dict[str, Any]:
    """The message's config as a dict (Flower's keys, ``server-round`` among them)."""
    return dict(msg.content[key]) if key in msg.content else {}


def train_reply(msg: Message, context: Context, arrays: list[np.ndarray] | ArrayRecord, num_examples: int,
                metrics: dict[str, Any] | None = None) -> Message:
    """The reply to a train message: ``arrays``, ``metrics`` (numeric) plus ``num-examples`` and
    ``partition-id``; ``str``/``bytes`` metrics travel in a ``ConfigRecord`` named ``"extra"``.

    The strategies read a reply's arrays by name (see
    :func:`flwr_strategies.adapters.message.reply_names`): a list of as many arrays as the message's
    ``"arrays"`` record held is named like that record (in order: the model comes back under the
    model's names), any other list ``"0"``, ``"1"``...; an ``ArrayRecord`` is sent as it is."""
    metrics = dict(metrics or {})
    numeric, other = numeric_metrics(metrics), {k: v for k, v in metrics.items() if isinstance(v, (str, bytes))}
    numeric[WEIGHT_KEY] = int(num_examples)
    if PARTITION_KEY in context.node_config:
        numeric[PARTITION_KEY] = int(context.node_config[PARTITION_KEY])
    if isinstance(arrays, ArrayRecord):
        record = arrays
    else:
        values = [np.asarray(a) for a in arrays]
        sent = msg.content.array_records.get("arrays")
        names = list(sent.keys()) if sent is not None and len(sent) == len(values) else [str(i) for i in range(len(values))]
        record = ArrayRecord({k: Array.from_numpy_ndarray(a) for k, a in zip(names, values)})
    content = RecordDict({"arrays": record, "metrics": MetricRecord(numeric)})
    if other:
        content["extra"] = ConfigRecord(other)
    return Message(content, reply_to=msg)


def numpy_client_app(client_fn: Callable[[Context], Any]) -> ClientApp:
    """A Message-API ``ClientApp`` whose handlers call ``client_fn(context)``'s ``fit``/``evaluate``.

    ``client_fn`` returns a legacy ``NumPyClient`` (any method's ready-made client, or your own).
    """
    app = ClientApp()

    @app.train(mods=[client_state_mod])  # a resumed run: the node's saved state (clients/store.py)
    def train(msg: Message, context: Context) -> Message:
        client = client_fn(context)
        weights, n, metrics = client.fit(msg.content["arrays"].to_numpy_ndarrays(), message_config(msg))
        return train_reply(msg, context, weights, n, metrics)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        client = client_fn(context)
        loss, n, metrics = client.evaluate(msg.content["arrays"].to_numpy_ndarrays(), message_config(msg))
        numeric = numeric_metrics(dict(metrics or {}))
        numeric.update({"loss": float(loss), WEIGHT_KEY: int(n)})
        return Message(RecordDict({"metrics": MetricRecord(numeric)}), reply_to=msg)

    app.query("partition")(partition_query)
    return app
