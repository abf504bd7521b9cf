"""Message-API adapter: a ``flwr.serverapp.strategy.Strategy`` that drives a method's core.

Every method's Message-API strategy is a declaration: a subclass of :class:`MessageStrategy` that
names its core and its config dataclasses (see :mod:`flwr_strategies.adapters.method`). It runs on
Flower's own ``Strategy.start()`` and overrides the hooks only:

- ``configure_train`` learns in round 1 which node holds which partition (:class:`NodeDirectory`),
  builds the core from the ``arrays`` Flower passes in (the global model: when a strategy wrapper
  changed them, a centralized method continues from them, others raise), and sends one
  ``Message`` per client (its arrays, named like the user's ``state_dict`` when they are the model;
  ``partition-id``, ``server-round`` and the run's ``client-state-key``
  (:mod:`flwr_strategies.clients.store`) in its config);
- replies are decoded in one place (:meth:`MessageStrategy._decode`), as read-only views of their
  bytes, and read by name, never by position (:func:`reply_names`): the names sent in another
  order are put back in the order sent, as Flower's FedAvg matches arrays by name; any other names
  are rejected, naming the expected and the received ones;
- a node found unreachable is left out of later rounds until it answers again
  (:mod:`~flwr_strategies.adapters.liveness`);
- the round itself is run by the shared :class:`~flwr_strategies.adapters.recorder.RoundSession`
  and recorded in ``self.history``; :meth:`MessageStrategy.central_evaluation` makes ``start()``'s
  ``evaluate_fn`` follow the method (its evaluation rounds, per-peer scores).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from ..common import PARTITION_KEY
from ..core.aggregation import SKIP_KEYS, weighted_mean_metrics
from ..core.messages import Reply, numeric_metrics
from ..core.server import ConfigFn
from ..core.validation import Rejection, SettingError, check_integer, check_number
from .liveness import UnreachableNodes
from .method import CoreFactory, MethodAdapter
from .recorder import evaluation_sample
from .wire import NUMPY_STYPE, npy_bytes, npy_view

__all__ = ["MessageStrategy", "PARTITION_QUERY", "config_record", "NodeDirectory", "reply_names"]

NUM_PARTITIONS_KEY = "num-partitions"
#: Message type of the identification query (``@app.query("partition")`` answers it).
PARTITION_QUERY = "query.partition"

#: Flower's ``(list[RecordDict], weighted_by_key) -> MetricRecord``.
MetricsAggrFn = Callable[[list[RecordDict], str], MetricRecord]


def config_record(values: dict[str, Any]) -> ConfigRecord:
    """A ``ConfigRecord`` of ``values`` (NumPy scalars become Python scalars; None is dropped)."""
    return ConfigRecord({k: v.item() if isinstance(v, np.generic) else v for k, v in values.items() if v is not None})


def _arrays(record: ArrayRecord, names: list[str]) -> list[np.ndarray]:
    """The arrays of ``record`` named ``names``, in that order, as read-only views of the record's
    bytes (:func:`~flwr_strategies.adapters.wire.npy_view`): no copy, no memory of model size."""
    out = []
    for name in names:
        array = record[name]
        if array.stype != NUMPY_STYPE:  # as Array.numpy()
            raise TypeError(f"Unsupported serialization type for numpy conversion: '{array.stype}'")
        out.append(npy_view(array.data))
    return out


def reply_names(sent: list[str], count: int) -> list[str]:
    """The names a reply of ``count`` arrays must carry, in order, for an instruction whose
    ``ArrayRecord`` had the names ``sent``: ``sent`` when the reply returns as many arrays (the
    model comes back under the model's names), else ``"0".."count-1"`` (``ArrayRecord(list)``'s)."""
    return list(sent) if count == len(sent) else [str(i) for i in range(count)]


def _names_problem(expected: list[str], received: list[str]) -> str:
    """Why the names ``received`` are not ``expected`` (the same set in another order is fine)."""
    def show(names: list[str]) -> str:
        return repr(names) if len(names) <= 8 else f"{repr(names[:8])[:-1]}, ...] ({len(names)} names)"

    have, want = set(received), set(expected)
    missing = [n for n in expected if n not in have]
    unexpected = [n for n in received if n not in want]
    detail = "; ".join(part for part in (f"missing {show(missing)}" if missing else "",
                                         f"not sent {show(unexpected)}" if unexpected else "") if part)
    return f"array names {show(received)} do not match the names sent {show(expected)} ({detail})"


def _metrics(content: RecordDict) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for record in (*content.metric_records.values(), *content.config_records.values()):  # configs win a clash
        out.update(record)
    return out


class NodeDirectory:
    """Which node holds which partition, learned by asking the nodes (``query.partition``).

    Parameters
    ----------
    min_available_nodes : int (default: 2)
        Nodes that must be connected before asking, >= 1.
    wait_timeout : float (default: 600.0)
        Seconds to wait for the nodes and every partition they report, > 0.
    configrecord_key : str (default: "config")
        Key of the query's ``ConfigRecord``.
    """

    def __init__(self, min_available_nodes: int = 2, wait_timeout: float = 600.0, configrecord_key: str = "config") -> None:
        self.min_available_nodes = int(min_available_nodes)
        self.wait_timeout = float(wait_timeout)
        self.configrecord_key = configrecord_key
        self.partition_of_node: dict[int, int] = {}
        self.node_of_partition: dict[int, int] = {}
        self.num_partitions: int | None = None

    def _ask(self, grid: Grid, node_ids: list[int], timeout: float) -> dict[int, tuple[int, int | None]]:
        messages = [self.query_message(n) for n in node_ids]
        answers: dict[int, tuple[int, int | None]] = {}
        for reply in grid.send_and_receive(messages, timeout=timeout):
            if reply.has_error():
                continue
            metrics = _metrics(reply.content)
            if PARTITION_KEY in metrics:
                total = metrics.get(NUM_PARTITIONS_KEY)
                answers[int(reply.metadata.src_node_id)] = (int(metrics[PARTITION_KEY]), None if total is None else int(total))
        return answers

    def query_message(self, node_id: int) -> Message:
        """The ``query.partition`` message to ``node_id``."""
        return Message(RecordDict({self.configrecord_key: ConfigRecord({"query": "partition"})}),
                       dst_node_id=int(node_id), message_type=PARTITION_QUERY)

    def identify(self, grid: Grid, timeout: float | None = None) -> dict[int, int]:
        """Wait for the nodes and learn each node's partition id; returns ``{partition: node}``.

        One node is asked first; when its ClientApp does not answer the query, the nodes are
        ordered by node id with one warning, and no other node is asked (so a ClientApp without
        ``partition_query`` fails once, not once per node)."""
        timeout = self.wait_timeout if timeout is None else float(timeout)
        deadline = time.monotonic() + timeout
        expected: int | None = None
        unanswered: set[int] = set()
        while True:
            nodes = [int(n) for n in grid.get_node_ids()]
            new = [n for n in nodes if n not in self.partition_of_node and n not in unanswered]
            if not self.partition_of_node and not unanswered:
                new = sorted(new)[:1]  # one node first: a ClientApp without the query fails once, not on every node
            if len(nodes) >= self.min_available_nodes and new:
                answers = self._ask(grid, new, max(1.0, deadline - time.monotonic()))
                for node, (pid, total) in answers.items():
                    if pid in self.node_of_partition and self.node_of_partition[pid] != node:
                        raise RuntimeError(f"nodes {self.node_of_partition[pid]} and {node} both hold partition {pid}")
                    self.partition_of_node[node] = pid
                    self.node_of_partition[pid] = node
                    if total is not None:
                        expected = max(expected or 0, total)
                unanswered.update(n for n in new if n not in answers)
            if len(nodes) >= self.min_available_nodes and not self.partition_of_node and unanswered:
                log(WARNING, "The ClientApp does not answer the partition query: clients are ordered by node id, so "
                             "sampling and peer roles are not reproducible across runs. Register "
                             "flwr_strategies.clients.app.partition_query with app.query('partition').")
                for pid, node in enumerate(sorted(nodes)):
                    self.partition_of_node[node] = pid
                    self.node_of_partition[pid] = node
                self.num_partitions = len(nodes)
                return dict(self.node_of_partition)
            if unanswered and self.partition_of_node:
                raise RuntimeError(
                    f"nodes {sorted(unanswered)} did not answer the partition query while others did; register "
                    "flwr_strategies.clients.app.partition_query on every ClientApp (app.query('partition'))"
                )
            have = set(self.node_of_partition)
            asked = all(n in self.partition_of_node or n in unanswered for n in nodes)
            if len(nodes) >= self.min_available_nodes and have and asked and (expected is None or have >= set(range(expected))):
                self.num_partitions = expected if expected is not None else max(have) + 1
                return dict(self.node_of_partition)
            if time.monotonic() > deadline:
                missing = sorted(set(range(expected)) - have) if expected else []
                raise TimeoutError(
                    f"after {timeout:.0f}s: {len(nodes)} nodes connected (need {self.min_available_nodes})"
                    + (f", partitions {missing[:10]} missing" if missing else "")
                )
            if len(nodes) >= self.min_available_nodes and not asked:
                continue  # ask the nodes not asked yet
            time.sleep(0.2 if len(nodes) >= self.min_available_nodes else 1.0)


class MessageStrategy(MethodAdapter, Strategy):
    """A Message-API Flower strategy over a method's framework-neutral server core.

    Takes the arguments of Flower's Message-API ``FedAvg`` with Flower's names, meanings and
    defaults, plus the method's hyperparameters as keyword arguments (the fields of the method's
    config dataclass, listed in its docstring). Runs on Flower's ``Strategy.start()``. A method's
    Message-API class shares the declaration of its legacy class:
    ``class DFedCata(MessageStrategy, like=legacy.DFedCata)`` takes its ``core_cls``,
    ``hyperparameters``, ``arguments``, ``renamed`` and ``federated_evaluation``.

    Parameters
    ----------
    fraction_train : float (default: 1.0)
        Fraction of nodes used during training, in [0, 1] (0 skips training). If
        ``min_train_nodes`` is larger than ``fraction_train * total_connected_nodes``,
        ``min_train_nodes`` are still sampled. Decentralized methods train every peer every round:
        1.0 only.
    fraction_evaluate : float (default: 1.0)
        Fraction of nodes used during federated evaluation of the global model, in [0, 1]
        (0 turns it off).
    min_train_nodes : int (default: 2)
        Minimum number of nodes used during training, >= 0.
    min_evaluate_nodes : int (default: 2)
        Minimum number of nodes used during federated evaluation, >= 0.
    min_available_nodes : int (default: 2)
        Minimum number of total nodes in the system, >= 1. The strategy also waits for every
        partition the nodes report in ``num-partitions``.
    weighted_by_key : str (default: "num-examples")
        The metric of each reply that weights the averages of arrays and metrics.
    arrayrecord_key : str (default: "arrays")
        Key of the ``ArrayRecord`` in the messages.
    configrecord_key : str (default: "config")
        Key of the ``ConfigRecord`` in the messages.
    train_metrics_aggr_fn : callable | None (default: None)
        ``(list[RecordDict], weighted_by_key) -> MetricRecord`` over the accepted training replies;
        its output joins the method's own round metrics. None: the weighted mean of every numeric
        metric the replies share.
    evaluate_metrics_aggr_fn : callable | None (default: None)
        The same for federated evaluation replies.
    seed : int (default: 0)
        Seed of the sampling and of the method's server-side randomness, >= 0.
    on_bad_reply : str (default: "drop")
        ``"drop"``: a reply that fails validation counts as a failed client; ``"raise"``: raise
        :class:`~flwr_strategies.core.validation.ReplyError` with the state unchanged.
    on_train_config_fn : callable | None (default: None)
        ``server_round -> dict`` merged into every training config (per-round lr schedules).
    wait_timeout : float (default: 600.0)
        Seconds to wait for the nodes and partitions before round 1, > 0.
    on_round_end : callable | None (default: None)
        Called with every finished round record.
    core_factory : callable | None (default: None)
        ``(initial_arrays, num_partitions) -> ServerCore`` instead of a method's declaration.
    max_num_examples : int | Mapping[int, int] | None (default: None)
        The most a reply's ``weighted_by_key`` count may weigh: an integer >= 1 for every node, or
        ``{partition_id: bound}`` (each partition's dataset size, as the project's ServerApp sets
        it; a reply from a partition it does not name is rejected). A count is the client's own
        claim: without a bound one node reporting ``2**31`` owns the whole average, as in Flower's
        FedAvg. A count above its bound is weighted as the bound and counted in the round's
        ``num_examples_clipped`` metric. None (default): counts are trusted, as Flower does.
    """

    def __init_subclass__(cls, like: type[MethodAdapter] | None = None, **kwargs: Any) -> None:
        if like is not None:  # the legacy class's declaration: one declaration for both APIs
            for attr in ("core_cls", "hyperparameters", "arguments", "renamed", "federated_evaluation"):
                setattr(cls, attr, getattr(like, attr))
        super().__init_subclass__(**kwargs)

    def __init__(
        self, fraction_train: float = 1.0, fraction_evaluate: float = 1.0, min_train_nodes: int = 2,
        min_evaluate_nodes: int = 2, min_available_nodes: int = 2, weighted_by_key: str = "num-examples",
        arrayrecord_key: str = "arrays", configrecord_key: str = "config",
        train_metrics_aggr_fn: MetricsAggrFn | None = None, evaluate_metrics_aggr_fn: MetricsAggrFn | None = None,
        *, seed: int = 0, on_bad_reply: str = "drop", on_train_config_fn: ConfigFn | None = None,
        wait_timeout: float = 600.0, on_round_end: Callable[[dict[str, Any]], None] | None = None,
        core_factory: CoreFactory | None = None, max_num_examples: int | Mapping[int, int] | None = None,
        **hyperparameters: Any,
    ) -> None:
        name = type(self).__name__
        for key, value in (("fraction_train", fraction_train), ("fraction_evaluate", fraction_evaluate)):
            check_number(f"{name}: {key}", value, "in [0, 1]", lambda v: 0.0 <= v <= 1.0)
        for key, value, low in (("min_train_nodes", min_train_nodes, 0), ("min_evaluate_nodes", min_evaluate_nodes, 0),
                                ("min_available_nodes", min_available_nodes, 1)):
            check_integer(f"{name}: {key}", value, low)
        for key, value in (("weighted_by_key", weighted_by_key), ("arrayrecord_key", arrayrecord_key),
                           ("configrecord_key", configrecord_key)):
            if not isinstance(value, str) or not value:
                raise SettingError(f"{name}: {key}", value, "a non-empty string")
        self.fraction_train = float(fraction_train)
        self.fraction_evaluate = float(fraction_evaluate)
        self.min_train_nodes = int(min_train_nodes)
        self.min_evaluate_nodes = int(min_evaluate_nodes)
        self.min_available_nodes = int(min_available_nodes)
        self.weighted_by_key = weighted_by_key
        self.arrayrecord_key = arrayrecord_key
        self.configrecord_key = configrecord_key
        self.train_metrics_aggr_fn = train_metrics_aggr_fn
        self.evaluate_metrics_aggr_fn = evaluate_metrics_aggr_fn
        self.on_train_config_fn = on_train_config_fn
        if self.fraction_evaluate == 0.0:
            self.min_evaluate_nodes = 0  # as Flower's FedAvg
        self._init_method(hyperparameters=hyperparameters, seed=seed, on_bad_reply=on_bad_reply,
                          core_factory=core_factory, on_round_end=on_round_end, wait_timeout=wait_timeout,
                          max_num_examples=max_num_examples)
        self.nodes = NodeDirectory(self.min_available_nodes, self.wait_timeout, configrecord_key)
        self._returned: ArrayRecord | None = None
        self._sent: dict[int, list[tuple[Any, int]]] = {}  # round -> (pushed message's metadata, partition)
        self.unreachable = UnreachableNodes(lambda node: self.nodes.query_message(node))
        self._left_out: dict[int, list[int]] = {}  # round -> partitions left out as unreachable
        self._layouts: dict[int, dict[int, list[str]]] = {}  # round -> partition -> array names sent
        self._central = False

    def summary(self) -> None:
        """Log summary configuration of the strategy."""
        log(INFO, "\t├──> Method: %s", self.core if self.core is not None else
            (self.core_cls.__name__ if self.core_cls is not None else "core_factory") + " (built in round 1)")
        for key, cfg in self.configs.items():
            log(INFO, "\t│\t├── %s", cfg)
        log(INFO, "\t├──> Sampling:")
        log(INFO, "\t│\t├──Fraction: train (%.2f) | evaluate ( %.2f)", self.fraction_train, self.fraction_evaluate)
        log(INFO, "\t│\t├──Minimum nodes: train (%d) | evaluate (%d)", self.min_train_nodes, self.min_evaluate_nodes)
        log(INFO, "\t│\t└──Minimum available nodes: %d", self.min_available_nodes)
        log(INFO, "\t└──> Keys in records:")
        log(INFO, "\t\t├── Weighted by: '%s'", self.weighted_by_key)
        log(INFO, "\t\t├── ArrayRecord key: '%s'", self.arrayrecord_key)
        log(INFO, "\t\t└── ConfigRecord key: '%s'", self.configrecord_key)

    # ------------------------------------------------------------------ identity
    @property
    def node_of_partition(self) -> dict[int, int]:
        return self.nodes.node_of_partition

    @property
    def partition_of_node(self) -> dict[int, int]:
        return self.nodes.partition_of_node

    @property
    def num_partitions(self) -> int | None:
        return self.nodes.num_partitions

    def identify(self, grid: Grid, timeout: float | None = None) -> dict[int, int]:
        """Wait for the nodes and learn each node's partition id; returns ``{partition: node}``."""
        return self.nodes.identify(grid, timeout)

    # ------------------------------------------------------------------ records
    def _array_record(self, arrays: list[np.ndarray], model_layout: bool) -> ArrayRecord:
        names = self._names if model_layout and self._names is not None and len(self._names) == len(arrays) else None
        names = names or [str(i) for i in range(len(arrays))]
        # Array(a)'s fields and bytes, with one copy of the data (wire.npy_bytes)
        return ArrayRecord({k: Array(dtype=str(a.dtype), shape=tuple(int(s) for s in a.shape), stype=NUMPY_STYPE,
                                     data=npy_bytes(a)) for k, a in zip(names, map(np.asarray, arrays))})

    def global_array_record(self) -> ArrayRecord:
        """The core's global model (:meth:`~flwr_strategies.core.server.ServerCore.model_arrays`),
        named like the initial arrays."""
        return self._array_record(self.core.model_arrays(), True)

    def _follow(self, arrays: ArrayRecord, rnd: int) -> None:
        """Continue from ``arrays`` when they are not the model this strategy gave Flower."""
        own = self._returned
        if arrays is own or (own is not None and list(arrays.keys()) == list(own.keys()) and all(
                (a.dtype, a.shape, a.data) == (b.dtype, b.shape, b.data) for a, b in zip(arrays.values(), own.values()))):
            return
        self.sync_global(arrays.to_numpy_ndarrays(), rnd)

    # ------------------------------------------------------------------ Strategy API
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """Sample nodes by partition and send each its instruction (round 1: identify the nodes and
        build the core from ``arrays``)."""
        if self.core is None:
            if self.num_partitions is None:
                self.identify(grid)
            self._names = list(arrays.keys())
            self._install_core(self.build_core(arrays.to_numpy_ndarrays(), int(self.num_partitions)))
            self._returned = arrays
        else:
            self._follow(arrays, self.method_round(server_round))
        rnd = self.method_round(server_round)
        self.history.record(rnd)
        if self.fraction_train == 0.0:
            return []
        connected = self._reachable_nodes(grid, rnd, training=True)
        available = [pid for pid, node in self.node_of_partition.items() if node in connected]
        shared: dict[int, tuple[ArrayRecord, list[str]]] = {}
        layouts = self._layouts[rnd] = {}

        def message(ins, cfg: dict[str, Any]) -> Message:
            key = id(ins.arrays)
            if key not in shared:
                record = self._array_record(ins.arrays, ins.model_layout)
                shared[key] = (record, list(record.keys()))
            layouts[int(ins.partition_id)] = shared[key][1]  # what its reply is read against
            content = RecordDict({self.arrayrecord_key: shared[key][0], self.configrecord_key: config_record(cfg)})
            return Message(content, dst_node_id=self.node_of_partition[ins.partition_id], message_type=MessageType.TRAIN)

        messages = self.session.configure(self.core, rnd, available, message, base=dict(config or {}),
                                           per_partition=self.client_state_config)
        # the grid gives each message its id when it pushes it: the error reply that Flower's
        # SuperLink sends for an unreachable node names it only as the reply to one of these
        self._sent[rnd] = [(msg.metadata, self.partition_of_node[msg.metadata.dst_node_id]) for msg in messages]
        return messages

    def _reachable_nodes(self, grid: Grid, rnd: int, training: bool) -> set[int]:
        """Flower's connected nodes less those a round found unreachable, after re-checking them
        (:class:`~flwr_strategies.adapters.liveness.UnreachableNodes`). In training each partition
        left out is logged as a failure of round ``rnd``; when the core could not sample its
        ``min_train_nodes`` without them, the nodes Flower still lists are kept (the round waits for
        them, as before they were found unreachable)."""
        listed = {int(n) for n in grid.get_node_ids()}
        reachable = self.unreachable.reachable(grid, listed, rnd)
        if not training:
            return reachable
        core = self.core
        known = [sum(1 for n in nodes if n in self.partition_of_node) for nodes in (reachable, listed)]
        left_out = self.unreachable.left_out()
        if (reachable != listed and not core.full_participation and core.num_to_sample(known[0]) > known[0]
                and core.num_to_sample(known[1]) <= known[1]):
            log(WARNING, "Round %s: min_train_nodes=%s needs the nodes found unreachable (partitions %s); the round "
                         "sends to them and waits", rnd, core.min_train, sorted(left_out))
            return listed
        for pid, u in sorted(left_out.items()):
            self.history.log_failure(rnd, "fit", f"partition {pid}: left out, its node has been unreachable since "
                                                  f"round {u.since} ({u.reason}); it rejoins when it answers again")
        self._left_out[rnd] = sorted(left_out)
        return reachable

    def _decode(self, server_round: int, msg: Message) -> Reply | Rejection | int:
        """One reply as a :class:`Reply`, a :class:`Rejection` or a failed partition id: the only
        place replies are decoded."""
        node = int(msg.metadata.src_node_id)
        pid = self.partition_of_node.get(node)
        if pid is None and msg.has_error():  # Flower's own reply for a node it could not reach
            reply_to = msg.metadata.reply_to_message_id
            pid = next((p for meta, p in self._sent.get(server_round, []) if meta.message_id == reply_to), None)
        if pid is None:
            return Rejection(None, f"reply from unknown node {node}")
        if msg.has_error():
            self.history.log_failure(server_round, "fit", f"partition {pid}: {msg.error.reason}")
            return pid
        records = msg.content.array_records
        if self.arrayrecord_key in records:
            record = records[self.arrayrecord_key]
        elif len(records) == 1:
            record = next(iter(records.values()))
        elif not records:
            record = ArrayRecord()
        else:
            return Rejection(pid, f"{len(records)} ArrayRecords and none named '{self.arrayrecord_key}'")
        expected = reply_names(self._layouts.get(server_round, {}).get(pid, []), len(record))
        received = list(record.keys())
        if received != expected and set(received) != set(expected):
            return Rejection(pid, _names_problem(expected, received))
        try:  # read by name: the names sent in another order come back in the order sent
            arrays = _arrays(record, expected)
        except Exception as err:  # corrupt payload bytes
            return Rejection(pid, f"arrays could not be decoded ({type(err).__name__}: {err})")
        metrics = _metrics(msg.content)
        if self.weighted_by_key not in metrics:
            return Rejection(pid, f"metric '{self.weighted_by_key}' (weighted_by_key) is missing")
        n = metrics[self.weighted_by_key]
        if isinstance(n, float) and n.is_integer():
            n = int(n)
        claimed = metrics.get(PARTITION_KEY)
        if claimed is not None and claimed != pid:
            return Rejection(pid, f"reply claims partition {claimed!r}")
        return Reply(pid, arrays, n, metrics)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Check every reply, then let the core aggregate the valid ones (state unchanged on error)."""
        rnd = self.method_round(server_round)
        if self.fraction_train == 0.0:
            return None, None
        replies = list(replies)
        items = [self._decode(rnd, msg) for msg in replies]
        accepted = {item.partition_id: msg.content for item, msg in zip(items, replies) if isinstance(item, Reply)}
        valid, rejected, failed = self.session.sort(rnd, items)
        self.unreachable.note(rnd, self._sent.pop(rnd, []), replies)
        self._layouts.pop(rnd, None)
        result, metrics = self.session.train(self.core, rnd, valid, rejected, failed, logged=self._left_out.pop(rnd, []))
        if self.train_metrics_aggr_fn is not None:
            for r in result.rejections:
                accepted.pop(r.partition_id, None)
            contents = [accepted[p] for p in sorted(accepted)]
            user = dict(self.train_metrics_aggr_fn(contents, self.weighted_by_key) or {}) if contents else {}
            metrics.update(user)
            self.session.record(rnd, user, "fit_")
        if self.core.full_participation:
            # drop the arrays the decentralized core has taken into its tables: Flower's Strategy.start() keeps a
            # round's replies until the next round's arrive, so the last round's models (every peer sends its own)
            # would stay in memory while the next round's messages are in flight. The metrics stay; nothing reads
            # the arrays again (decentralized methods refuse strategy wrappers, which could)
            for record in (record for msg in replies if msg.has_content() for record in msg.content.values()):
                if isinstance(record, ArrayRecord):
                    record.clear()
        self._returned = self.global_array_record()
        return self._returned, MetricRecord(numeric_metrics(metrics))

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """Send ``arrays`` (the global model) to a seeded sample of the nodes for evaluation."""
        if self.fraction_evaluate == 0.0 or self.core is None:
            return []
        rnd = self.method_round(server_round)
        self._follow(arrays, rnd)
        if not self.core.should_evaluate(rnd):
            return []
        connected = self._reachable_nodes(grid, rnd, training=False)
        ids = sorted(pid for pid, node in self.node_of_partition.items() if node in connected)
        chosen = evaluation_sample(ids, rnd, self.fraction_evaluate, self.min_evaluate_nodes, self.seed)
        self.history.record(rnd)["bytes_down"] += sum(
            int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in arrays.values()) * len(chosen)
        base = {**dict(config or {}), "server-round": rnd}
        return [Message(RecordDict({self.arrayrecord_key: arrays,
                                    self.configrecord_key: config_record({**base, PARTITION_KEY: pid})}),
                        dst_node_id=self.node_of_partition[pid], message_type=MessageType.EVALUATE) for pid in chosen]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The weighted mean of the evaluation metrics (or ``evaluate_metrics_aggr_fn``'s)."""
        rnd = self.method_round(server_round)
        rec = self.history.record(rnd)
        rows: list[tuple[int, float, dict[str, float], RecordDict]] = []
        for msg in replies:
            pid = self.partition_of_node.get(int(msg.metadata.src_node_id), -1)
            if msg.has_error():
                rec["failures"] += 1
                continue
            values = numeric_metrics(_metrics(msg.content))
            n = values.get(self.weighted_by_key, 0)
            if not n or n <= 0 or not all(math.isfinite(v) for v in values.values()):
                rec["failures"] += 1
                continue
            rows.append((pid, float(n), values, msg.content))
        out: MetricRecord | None = None
        if rows:
            rows.sort(key=lambda row: row[0])
            if self.evaluate_metrics_aggr_fn is not None:
                out = self.evaluate_metrics_aggr_fn([row[3] for row in rows], self.weighted_by_key)
            else:
                skip = SKIP_KEYS | {self.weighted_by_key}
                out = MetricRecord(weighted_mean_metrics([(n, v) for _, n, v, _ in rows], skip=skip))
            self.session.record(rnd, dict(out or {}), "federated_")
        if not self._central:
            self.history.finish()
        return out

    # ------------------------------------------------------------------ central evaluation
    def central_evaluation(
        self, evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None]
    ) -> Callable[[int, ArrayRecord], MetricRecord | None]:
        """``evaluate_fn`` for ``start()`` that follows the method: it runs in the rounds the method
        evaluates (the initial model, then every round or every ``eval_every``), on the method's
        evaluation model, adds the method's own metrics (peers' consensus distance and scores),
        numbers rounds as the method does after a resume, and records the result in ``history``.

        ``evaluate_fn`` is Flower's ``(server_round, arrays) -> MetricRecord | None`` with the loss
        under ``"loss"``. Passing ``evaluate_fn`` to ``start()`` directly also works: Flower then
        scores the arrays the strategy returns after every round.
        """
        self._central = True

        def pair(out: MetricRecord | None):
            if out is None:
                return None
            metrics = dict(out)
            return float(metrics.get("loss", float("nan"))), metrics

        def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            rnd, res = self._evaluate_central(server_round, arrays, lambda r: pair(evaluate_fn(r, arrays)),
                                              lambda r, model: pair(evaluate_fn(r, self._array_record(model, True))))
            if rnd is None:
                return None
            self.history.record(rnd)
            res = self.session.evaluated(rnd, res)
            self.history.finish()
            return None if res is None else MetricRecord({**numeric_metrics(res[1]), "loss": res[0]})

        return evaluate
