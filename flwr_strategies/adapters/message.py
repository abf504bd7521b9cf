"""Message-API adapter: a ``flwr.serverapp.strategy.Strategy`` that drives a :class:`ServerCore`.

Every method's Message-API strategy is a thin subclass of :class:`MessageStrategy` that says how to
build its core from the initial arrays and the number of partitions (:meth:`build_core`). The
adapter handles the Flower side once for all of them:

- ``start(grid, initial_arrays, num_rounds, ...)`` as in Flower, plus ``state=`` to resume a
  checkpoint (:meth:`MessageStrategy.state_dict`);
- node identity: before round 1 it asks every node for its ``partition-id`` with a
  ``query.partition`` message (answered by
  :func:`flwr_strategies.clients.app.partition_query`, one line in a ClientApp; the ready-made
  client apps register it) and waits until every partition ``0..num-partitions-1`` is connected.
  Sampling and per-client models then follow partition ids, so runs are reproducible. A ClientApp
  that does not answer gets a warning, and nodes are ordered by node id instead;
- one ``Message`` per client (its own arrays and config; ``partition-id`` and ``server-round`` in
  the config), with the arrays named like the user's ``state_dict`` when they are the model;
- replies: an error reply is a failed client; a reply with the wrong arrays, a missing
  ``num-examples``, NaN values or a foreign partition is rejected before the core's state
  changes (``on_bad_reply``, :mod:`flwr_strategies.core.validation`);
- per-round records in ``self.history``, and Flower's ``Result``.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable, Iterable
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from ..core.messages import Instruction, Reply, numeric_metrics
from ..core.server import ConfigFn, ServerCore
from ..core.validation import Rejection, ReplyError, check_policy
from .recorder import RoundRecorder, arrays_nbytes, bytes_entries

__all__ = ["MessageStrategy", "CoreFactoryStrategy", "PARTITION_QUERY", "config_record"]

PARTITION_KEY = "partition-id"
NUM_PARTITIONS_KEY = "num-partitions"
#: Message type of the identification query (``@app.query("partition")`` answers it).
PARTITION_QUERY = "query.partition"


def _plain(value: Any) -> Any:
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def config_record(values: dict[str, Any]) -> ConfigRecord:
    """A ``ConfigRecord`` of ``values`` (NumPy scalars become Python scalars; None is dropped)."""
    return ConfigRecord({k: _plain(v) for k, v in values.items() if v is not None})


class MessageStrategy(Strategy):
    """A Message-API Flower strategy over a framework-neutral :class:`ServerCore`.

    Parameters
    ----------
    fraction_train : float (default: 1.0)
        Fraction of nodes sampled for training each round, in (0, 1].
    fraction_evaluate : float (default: 1.0)
        Fraction of nodes asked for federated evaluation of the global model, in [0, 1]
        (0 turns it off).
    min_train_nodes : int (default: 2)
        Minimum number of nodes sampled for training, >= 1 (Flower's default).
    min_evaluate_nodes : int (default: 2)
        Minimum number of nodes in federated evaluation, >= 0 (Flower's default).
    min_available_nodes : int (default: 2)
        Nodes that must be connected before round 1, >= 1. The strategy also waits for every
        partition the nodes report in ``num-partitions``.
    seed : int (default: 0)
        Seed of the sampling generator and of the method's server-side randomness, >= 0.
    on_bad_reply : str (default: "drop")
        ``"drop"``: a reply that fails validation counts as a failed client; ``"raise"``: raise
        :class:`~flwr_strategies.core.validation.ReplyError` with the state unchanged.
    on_train_config_fn : callable | None (default: None)
        ``server_round -> dict`` merged into every training config (per-round lr schedules).
    weighted_by_key : str (default: "num-examples")
        Metric holding a reply's number of examples.
    arrayrecord_key, configrecord_key : str (default: "arrays", "config")
        Keys of the ``ArrayRecord`` and ``ConfigRecord`` in the messages (Flower's defaults).
    wait_timeout : float (default: 600.0)
        Seconds to wait for the nodes and partitions before round 1, > 0.
    on_round_end : callable | None (default: None)
        Called with every finished round record.
    """

    def __init__(
        self,
        *,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 1.0,
        min_train_nodes: int = 2,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int = 2,
        seed: int = 0,
        on_bad_reply: str = "drop",
        on_train_config_fn: ConfigFn | None = None,
        weighted_by_key: str = "num-examples",
        arrayrecord_key: str = "arrays",
        configrecord_key: str = "config",
        wait_timeout: float = 600.0,
        on_round_end: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if not (isinstance(fraction_train, (int, float)) and 0.0 < fraction_train <= 1.0):
            raise ValueError(f"fraction_train must be in (0, 1], got {fraction_train!r}")
        if not (isinstance(fraction_evaluate, (int, float)) and 0.0 <= fraction_evaluate <= 1.0):
            raise ValueError(f"fraction_evaluate must be in [0, 1], got {fraction_evaluate!r}")
        for name, value, low in (("min_train_nodes", min_train_nodes, 1), ("min_evaluate_nodes", min_evaluate_nodes, 0),
                                 ("min_available_nodes", min_available_nodes, 1), ("seed", seed, 0)):
            if int(value) != value or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not (isinstance(wait_timeout, (int, float)) and wait_timeout > 0):
            raise ValueError(f"wait_timeout must be > 0, got {wait_timeout!r}")
        self.fraction_train = float(fraction_train)
        self.fraction_evaluate = float(fraction_evaluate)
        self.min_train_nodes = int(min_train_nodes)
        self.min_evaluate_nodes = int(min_evaluate_nodes)
        self.min_available_nodes = int(min_available_nodes)
        self.seed = int(seed)
        self.on_bad_reply = check_policy(on_bad_reply)
        self.on_train_config_fn = on_train_config_fn
        self.weighted_by_key = weighted_by_key
        self.arrayrecord_key = arrayrecord_key
        self.configrecord_key = configrecord_key
        self.wait_timeout = float(wait_timeout)
        self.history = RoundRecorder(on_round_end)
        self.core: ServerCore | None = None
        self.partition_of_node: dict[int, int] = {}
        self.node_of_partition: dict[int, int] = {}
        self.num_partitions: int | None = None
        self._keys: list[str] | None = None
        self._sampled: dict[int, list[int]] = {}
        self._pending_state: dict[str, Any] | None = None

    # ------------------------------------------------------------------ to implement
    def build_core(self, initial_arrays: list[np.ndarray], num_partitions: int) -> ServerCore:
        """The method's :class:`ServerCore` for ``num_partitions`` clients starting at ``initial_arrays``.

        Subclasses pass ``fraction_train``, ``min_train_nodes`` (as ``min_train``), ``seed`` and
        ``on_train_config_fn`` (as ``on_train_config``) on to the core."""
        raise NotImplementedError

    def core_kwargs(self) -> dict[str, Any]:
        """The :class:`ServerCore` arguments this adapter owns (for :meth:`build_core`)."""
        return {
            "fraction_train": self.fraction_train,
            "min_train": self.min_train_nodes,
            "seed": self.seed,
            "on_train_config": self.on_train_config_fn,
        }

    def summary(self) -> None:
        log(INFO, "\t├──> Core: %s", self.core if self.core is not None else "(built at start)")
        log(INFO, "\t├──> Sampling: fraction_train %.2f (min %d), fraction_evaluate %.2f (min %d), min available %d",
            self.fraction_train, self.min_train_nodes, self.fraction_evaluate, self.min_evaluate_nodes,
            self.min_available_nodes)
        log(INFO, "\t└──> Bad replies: %s", self.on_bad_reply)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The core's state after the last completed round (see :meth:`start` ``state=``)."""
        if self.core is None:
            raise RuntimeError("the strategy has not started: nothing to checkpoint yet")
        return self.core.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state`` when the core is built (at :meth:`start`), or now if it exists."""
        if self.core is not None:
            self.core.load_state_dict(state)
        else:
            self._pending_state = state

    # ------------------------------------------------------------------ identity
    def _query_partitions(self, grid: Grid, node_ids: list[int], timeout: float) -> dict[int, tuple[int, int | None]]:
        messages = [
            Message(RecordDict({self.configrecord_key: ConfigRecord({"query": "partition"})}),
                    dst_node_id=int(n), message_type=PARTITION_QUERY)
            for n in node_ids
        ]
        answers: dict[int, tuple[int, int | None]] = {}
        for reply in grid.send_and_receive(messages, timeout=timeout):
            if reply.has_error():
                continue
            metrics = {}
            for record in reply.content.metric_records.values():
                metrics.update(record)
            for record in reply.content.config_records.values():
                metrics.update(record)
            if PARTITION_KEY in metrics:
                total = metrics.get(NUM_PARTITIONS_KEY)
                answers[int(reply.metadata.src_node_id)] = (int(metrics[PARTITION_KEY]), None if total is None else int(total))
        return answers

    def identify(self, grid: Grid, timeout: float | None = None) -> dict[int, int]:
        """Wait for the nodes and learn each node's partition id; returns ``{partition: node}``."""
        timeout = self.wait_timeout if timeout is None else float(timeout)
        deadline = time.monotonic() + timeout
        expected: int | None = None
        unanswered: set[int] = set()
        while True:
            nodes = [int(n) for n in grid.get_node_ids()]
            new = [n for n in nodes if n not in self.partition_of_node and n not in unanswered]
            if len(nodes) >= self.min_available_nodes and new:
                answers = self._query_partitions(grid, new, max(1.0, deadline - time.monotonic()))
                for node, (pid, total) in answers.items():
                    if pid in self.node_of_partition and self.node_of_partition[pid] != node:
                        raise RuntimeError(f"nodes {self.node_of_partition[pid]} and {node} both hold partition {pid}")
                    self.partition_of_node[node] = pid
                    self.node_of_partition[pid] = node
                    if total is not None:
                        expected = max(expected or 0, total)
                unanswered.update(n for n in new if n not in answers)
            if len(nodes) >= self.min_available_nodes and not self.partition_of_node and unanswered:
                return self._order_by_node_id(nodes)
            if unanswered and self.partition_of_node:
                raise RuntimeError(
                    f"nodes {sorted(unanswered)} did not answer the partition query while others did; register "
                    "flwr_strategies.clients.app.partition_query on every ClientApp (app.query('partition'))"
                )
            have = set(self.node_of_partition)
            if len(nodes) >= self.min_available_nodes and have and (expected is None or have >= set(range(expected))):
                self.num_partitions = expected if expected is not None else max(have) + 1
                return dict(self.node_of_partition)
            if time.monotonic() > deadline:
                missing = sorted(set(range(expected)) - have) if expected else []
                raise TimeoutError(
                    f"after {timeout:.0f}s: {len(nodes)} nodes connected (need {self.min_available_nodes})"
                    + (f", partitions {missing[:10]} missing" if missing else "")
                )
            time.sleep(0.2 if len(nodes) >= self.min_available_nodes else 1.0)

    def _order_by_node_id(self, nodes: list[int]) -> dict[int, int]:
        log(WARNING, "The ClientApp does not answer the partition query: clients are ordered by node id, so "
                     "sampling and peer roles are not reproducible across runs. Register "
                     "flwr_strategies.clients.app.partition_query with app.query('partition').")
        for pid, node in enumerate(sorted(nodes)):
            self.partition_of_node[node] = pid
            self.node_of_partition[pid] = node
        self.num_partitions = len(nodes)
        return dict(self.node_of_partition)

    # ------------------------------------------------------------------ records
    def _array_record(self, arrays: list[np.ndarray], model_layout: bool) -> ArrayRecord:
        keys = self._keys if model_layout and self._keys is not None and len(self._keys) == len(arrays) else None
        keys = keys or [str(i) for i in range(len(arrays))]
        return ArrayRecord({k: Array.from_numpy_ndarray(np.asarray(a)) for k, a in zip(keys, arrays)})

    def _ensure_core(self, grid: Grid, initial: ArrayRecord) -> ServerCore:
        if self.core is None:
            self.identify(grid)
            self._keys = list(initial.keys())
            self.core = self.build_core(initial.to_numpy_ndarrays(), int(self.num_partitions))
            if self._pending_state is not None:
                self.core.load_state_dict(self._pending_state)
                self._pending_state = None
        return self.core

    def global_array_record(self) -> ArrayRecord:
        """The core's global model, named like the initial arrays."""
        return self._array_record(self.core.global_arrays(), True)

    # ------------------------------------------------------------------ Strategy API
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        core = self._ensure_core(grid, arrays)
        rec = self.history.record(server_round)
        connected = {int(n) for n in grid.get_node_ids()}
        available = [pid for pid, node in self.node_of_partition.items() if node in connected]
        sampled = core.select(server_round, available)
        instructions: list[Instruction] = core.configure_train(server_round, sampled)
        self._sampled[server_round] = [ins.partition_id for ins in instructions]
        user = dict(config or {})
        shared: dict[int, ArrayRecord] = {}
        messages = []
        for ins in instructions:
            key = id(ins.arrays)
            if key not in shared:
                shared[key] = self._array_record(ins.arrays, ins.model_layout)
            cfg = {**user, **ins.config, "server-round": int(server_round), PARTITION_KEY: int(ins.partition_id)}
            rec["bytes_down"] += arrays_nbytes(ins.arrays) + bytes_entries(cfg)
            content = RecordDict({self.arrayrecord_key: shared[key], self.configrecord_key: config_record(cfg)})
            messages.append(Message(content, dst_node_id=self.node_of_partition[ins.partition_id],
                                    message_type=MessageType.TRAIN))
        rec["clients"] = len(messages)
        return messages

    def _reply(self, server_round: int, msg: Message) -> Reply | Rejection | int:
        node = int(msg.metadata.src_node_id)
        pid = self.partition_of_node.get(node)
        if pid is None:
            return Rejection(None, f"reply from unknown node {node}")
        if msg.has_error():
            self.history.log_failure(server_round, "fit", f"partition {pid}: {msg.error.reason}")
            return pid
        content = msg.content
        records = content.array_records
        if self.arrayrecord_key in records:
            record = records[self.arrayrecord_key]
        elif len(records) == 1:
            record = next(iter(records.values()))
        elif not records:
            record = ArrayRecord()
        else:
            return Rejection(pid, f"{len(records)} ArrayRecords and none named '{self.arrayrecord_key}'")
        try:
            arrays = record.to_numpy_ndarrays()
        except Exception as err:  # corrupt payload bytes
            return Rejection(pid, f"arrays could not be decoded ({type(err).__name__}: {err})")
        metrics: dict[str, Any] = {}
        for mrec in content.metric_records.values():
            metrics.update(mrec)
        for crec in content.config_records.values():
            metrics.update(crec)
        if self.weighted_by_key not in metrics:
            return Rejection(pid, f"metric '{self.weighted_by_key}' is missing")
        n = metrics[self.weighted_by_key]
        if isinstance(n, float) and n.is_integer():
            n = int(n)
        claimed = metrics.get(PARTITION_KEY)
        if claimed is not None and claimed != pid:
            return Rejection(pid, f"reply claims partition {claimed!r}")
        return Reply(pid, arrays, n, metrics)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        core = self.core
        rec = self.history.record(server_round)
        valid: list[Reply] = []
        rejected: list[Rejection] = []
        failed: list[int] = []
        for msg in replies:
            item = self._reply(server_round, msg)
            if isinstance(item, Reply):
                rec["bytes_up"] += arrays_nbytes(item.arrays) + bytes_entries(item.metrics)
                valid.append(item)
            elif isinstance(item, Rejection):
                rejected.append(item)
            else:
                failed.append(item)
        if rejected and self.on_bad_reply == "raise":
            raise ReplyError(f"{type(core).__name__} round {server_round}: {rejected[0]}")
        result = core.train_round(server_round, valid, sampled=self._sampled.pop(server_round, []), failed=failed,
                                  on_bad_reply=self.on_bad_reply)
        rejections = rejected + list(result.rejections)
        for r in rejections:
            log(WARNING, "Round %s: rejected reply from %s", server_round, r)
            self.history.log_failure(server_round, "rejected", str(r))
        metrics = dict(result)
        metrics["rejected"] = len(rejections)
        metrics["failures"] = int(metrics.get("failures", 0)) + sum(1 for r in rejected if r.partition_id is None)
        rec["failures"] = int(metrics["failures"])
        rec["rejected"] = len(rejections)
        for key, value in metrics.items():
            rec[f"fit_{key}"] = value
        return self.global_array_record(), MetricRecord(numeric_metrics(metrics))

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        if self.fraction_evaluate == 0.0 or self.core is None:
            return []
        if not self.core.should_evaluate(server_round):
            return []
        connected = {int(n) for n in grid.get_node_ids()}
        ids = sorted(pid for pid, node in self.node_of_partition.items() if node in connected)
        k = min(len(ids), max(int(len(ids) * self.fraction_evaluate), self.min_evaluate_nodes))
        rng = np.random.default_rng([self.seed, server_round, 0xE7A1])
        chosen = [ids[int(i)] for i in np.sort(rng.choice(len(ids), size=k, replace=False))]
        record = self.global_array_record()
        rec = self.history.record(server_round)
        rec["bytes_down"] += arrays_nbytes(self.core.global_arrays()) * len(chosen)
        out = []
        for pid in chosen:
            cfg = {**dict(config or {}), "server-round": int(server_round), "server_round": int(server_round),
                   PARTITION_KEY: pid}
            out.append(Message(RecordDict({self.arrayrecord_key: record, self.configrecord_key: config_record(cfg)}),
                               dst_node_id=self.node_of_partition[pid], message_type=MessageType.EVALUATE))
        return out

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        rec = self.history.record(server_round)
        rows: list[tuple[int, float, dict[str, float]]] = []
        for msg in replies:
            pid = self.partition_of_node.get(int(msg.metadata.src_node_id), -1)
            if msg.has_error():
                rec["failures"] += 1
                continue
            metrics: dict[str, Any] = {}
            for mrec in msg.content.metric_records.values():
                metrics.update(mrec)
            values = numeric_metrics(metrics)
            n = values.get(self.weighted_by_key, 0)
            if not n or n <= 0 or not all(math.isfinite(v) for v in values.values()):
                rec["failures"] += 1
                continue
            rows.append((pid, float(n), values))
        if not rows:
            return None
        rows.sort(key=lambda row: row[0])
        total = sum(n for _, n, _ in rows)
        keys = set.intersection(*(set(v) for _, _, v in rows)) - {self.weighted_by_key, PARTITION_KEY}
        out = {k: float(sum(n * v[k] for _, n, v in rows) / total) for k in sorted(keys)}
        for key, value in out.items():
            rec[f"federated_{key}"] = value
        return MetricRecord(out)

    # ------------------------------------------------------------------ the run
    def _central(self, server_round: int, evaluate_fn, result: Result) -> None:
        if evaluate_fn is None or not self.core.should_evaluate(server_round):
            return
        rec = self.history.record(server_round)

        def as_tuple(r: int, arrays: list[np.ndarray]):
            out = evaluate_fn(r, self._array_record(arrays, True))
            if out is None:
                return None
            metrics = dict(out)
            return float(metrics.get("loss", float("nan"))), metrics

        res = self.core.evaluate(server_round, as_tuple)
        if res is None:
            return
        loss, metrics = res
        rec["loss"] = float(loss)
        for key, value in metrics.items():
            rec[key] = value
        result.evaluate_metrics_serverapp[server_round] = MetricRecord({**numeric_metrics(metrics), "loss": float(loss)})

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
        *,
        state: dict[str, Any] | None = None,
    ) -> Result:
        """Run rounds ``1..num_rounds`` (or, with ``state``, the rounds after the checkpoint).

        Same arguments as Flower's ``Strategy.start``; ``state`` is a :meth:`state_dict` to
        resume from. Central evaluation (``evaluate_fn``) runs on the core's global model at the
        starting round and after every round the core evaluates. Returns Flower's ``Result``.
        """
        if int(num_rounds) != num_rounds or num_rounds < 0:
            raise ValueError(f"num_rounds must be an integer >= 0, got {num_rounds!r}")
        log(INFO, "Starting %s strategy:", type(self).__name__)
        if state is not None:
            self.load_state_dict(state)
        self._ensure_core(grid, initial_arrays)
        self.summary()
        train_config = ConfigRecord() if train_config is None else train_config
        evaluate_config = ConfigRecord() if evaluate_config is None else evaluate_config
        result = Result()
        result.arrays = self.global_array_record()
        first = self.core.server_round + 1
        t0 = time.time()
        self._central(first - 1, evaluate_fn, result)
        self.history.finish()
        for rnd in range(first, int(num_rounds) + 1):
            log(INFO, "[ROUND %s/%s]", rnd, num_rounds)
            replies = grid.send_and_receive(self.configure_train(rnd, result.arrays, train_config, grid), timeout=timeout)
            arrays, metrics = self.aggregate_train(rnd, replies)
            if arrays is not None:
                result.arrays = arrays
            if metrics is not None:
                result.train_metrics_clientapp[rnd] = metrics
            eval_messages = list(self.configure_evaluate(rnd, result.arrays, evaluate_config, grid))
            if eval_messages:
                agg = self.aggregate_evaluate(rnd, grid.send_and_receive(eval_messages, timeout=timeout))
                if agg is not None:
                    result.evaluate_metrics_clientapp[rnd] = agg
            self._central(rnd, evaluate_fn, result)
            self.history.finish()
        log(INFO, "Strategy execution finished in %.2fs", time.time() - t0)
        for line in io.StringIO(str(result)):
            log(INFO, "\t%s", line.strip("\n"))
        return result


class CoreFactoryStrategy(MessageStrategy):
    """A :class:`MessageStrategy` whose core comes from ``core_factory(initial_arrays, num_partitions)``
    (the registry's generic Message-API strategy for any registered method).

    Parameters
    ----------
    core_factory : callable
        ``(initial_arrays, num_partitions) -> ServerCore``.
    **kwargs
        :class:`MessageStrategy` arguments.
    """

    def __init__(self, core_factory: Callable[[list[np.ndarray], int], ServerCore], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.core_factory = core_factory

    def build_core(self, initial_arrays: list[np.ndarray], num_partitions: int) -> ServerCore:
        return self.core_factory(initial_arrays, num_partitions)
