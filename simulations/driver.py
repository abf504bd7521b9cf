"""The in-process driver: a method's :class:`~flwr_strategies.core.server.ServerCore` and its clients
called directly, in one process, with no Flower messages in between.

The core is framework-neutral, so nothing needs Flower's transport when server and clients live in
the same process. :class:`CoreDriver` runs its rounds through the round session both Flower
adapters use (:class:`~flwr_strategies.adapters.recorder.RoundSession`: ``select``,
``configure_train``, one client ``fit`` per instruction, ``train_round`` with the shared reply
validation and the core's atomic aggregation, the shared round record), then ``evaluate``. Clients get the same arrays (fresh copies, as deserialisation gives
them) and the same config (``partition-id`` added) as on those paths, so the per-round numbers are
bit-identical; ``tests/test_inprocess_driver.py`` checks this against both adapters.

What is skipped is Flower's: ``.npy`` serialisation of every array in both directions, ``Message``/
``FitIns`` construction, Flower's ``Server`` thread pool and client manager. Per-client state lives
in one Flower ``Context`` per partition (``context.state``), created when the partition is first
sampled, exactly as Flower's simulation runtime keeps it.

Every client call is bounded by ``client_timeout`` (:class:`~.timeouts.BoundedCaller`): a client
that raises or does not return in time is a failed client for that round, logged and counted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from logging import WARNING
from typing import Any

import numpy as np
from flwr.common import Context, RecordDict, log

from flwr_strategies.adapters.recorder import RoundRecorder, RoundSession
from flwr_strategies.core.messages import Instruction, Reply
from flwr_strategies.core.server import ServerCore
from flwr_strategies.common import PARTITION_KEY
from flwr_strategies.core.validation import Rejection, check_integer

from .timeouts import BoundedCaller

__all__ = ["CoreDriver", "PartitionContexts", "ClientFit", "EvalFn"]

#: ``(context, arrays, config) -> (arrays, num_examples, metrics)``: one client's ``fit``.
ClientFit = Callable[[Context, list[np.ndarray], dict[str, Any]], tuple[list[np.ndarray], int, dict[str, Any]]]
#: Flower's legacy ``evaluate_fn(server_round, arrays, config) -> (loss, metrics) | None``.
EvalFn = Callable[[int, list[np.ndarray], dict[str, Any]], "tuple[float, dict[str, Any]] | None"]


class PartitionContexts:
    """One Flower ``Context`` per partition, created on first use and kept for the whole run.

    Parameters
    ----------
    num_partitions : int
        Number of partitions (``node_config["num-partitions"]``), >= 1.
    run_config : dict | None
        The ``run_config`` every context carries. Defaults to empty.
    """

    def __init__(self, num_partitions: int, run_config: dict | None = None) -> None:
        self.num_partitions = check_integer("num_partitions", num_partitions, 1)
        self.run_config = dict(run_config or {})
        self._contexts: dict[int, Context] = {}

    def __getitem__(self, partition_id: int) -> Context:
        ctx = self._contexts.get(partition_id)
        if ctx is None:
            if not 0 <= partition_id < self.num_partitions:
                raise KeyError(f"partition id {partition_id} outside 0..{self.num_partitions - 1}")
            ctx = Context(
                run_id=0,
                node_id=partition_id,
                node_config={PARTITION_KEY: partition_id, "num-partitions": self.num_partitions},
                state=RecordDict(),
                run_config=dict(self.run_config),
            )
            self._contexts[partition_id] = ctx
        return ctx

    def __len__(self) -> int:
        return len(self._contexts)

    def values(self) -> list[Context]:
        """The contexts created so far (partitions that have been sampled)."""
        return list(self._contexts.values())


class CoreDriver:
    """Run a :class:`ServerCore` round by round against in-process clients.

    Parameters
    ----------
    core : ServerCore
        The method's server core (sampling, configuration, aggregation, state).
    client_fit : ClientFit
        Runs one client's local round: ``(context, arrays, config) -> (arrays, n, metrics)``.
    contexts : PartitionContexts
        The clients' contexts (their ``context.state`` survives rounds).
    evaluate_fn : EvalFn | None (default: None)
        Central evaluation, called through :meth:`ServerCore.evaluate` at the starting round and
        after every round the core evaluates (as the Flower adapters do).
    client_timeout : float | None (default: None)
        Seconds one client may take for one round's ``fit``, > 0; None: no limit.
    on_bad_reply : str (default: "drop")
        The shared reply policy (:mod:`flwr_strategies.core.validation`).
    max_num_examples : int | Mapping[int, int] | None (default: None)
        Bound on each reply's ``num_examples`` (see
        :meth:`~flwr_strategies.core.server.ServerCore.train_round`); None: not bounded.
    on_round_end : callable | None (default: None)
        Called with every finished round record.
    """

    def __init__(
        self,
        core: ServerCore,
        client_fit: ClientFit,
        contexts: PartitionContexts,
        *,
        evaluate_fn: EvalFn | None = None,
        client_timeout: float | None = None,
        on_bad_reply: str = "drop",
        max_num_examples: int | Mapping[int, int] | None = None,
        on_round_end: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if not isinstance(core, ServerCore):
            raise TypeError(f"core must be a ServerCore, got {type(core).__name__}")
        self.core = core
        self.client_fit = client_fit
        self.contexts = contexts
        self.evaluate_fn = evaluate_fn
        self.history = RoundRecorder(on_round_end)
        self.session = RoundSession(self.history, type(core).__name__, on_bad_reply, max_num_examples)
        self.call = BoundedCaller(client_timeout)
        self.partitions = list(range(contexts.num_partitions))

    @property
    def rounds(self) -> list[dict[str, Any]]:
        return self.history.rounds

    @property
    def failure_log(self) -> list[dict[str, Any]]:
        return self.history.failure_log

    # ------------------------------------------------------------------ one round
    def _fit(self, rnd: int, ins: Instruction, config: dict[str, Any]) -> Reply | Rejection | int:
        """One client's round: its reply, the rejection of a reply claiming another partition, or
        (it raised or did not return in time) its partition id."""
        pid, ctx = int(ins.partition_id), self.contexts[int(ins.partition_id)]
        sent = [np.array(a, copy=True) for a in ins.arrays]  # what deserialisation would give the client
        try:
            arrays, num_examples, metrics = self.call(lambda: self.client_fit(ctx, sent, config),
                                                      what=f"partition {pid} fit in round {rnd}")
        except Exception as err:  # a raising or hung client is a failed client
            self.history.log_failure(rnd, "fit", f"partition {pid}: {type(err).__name__}: {err}")
            log(WARNING, "Round %s: partition %s failed: %s: %s", rnd, pid, type(err).__name__, err)
            return pid
        metrics = dict(metrics or {})
        claimed = metrics.get(PARTITION_KEY)
        if claimed is not None and (not isinstance(claimed, (int, np.integer)) or int(claimed) != pid):
            return Rejection(pid, f"reply claims partition {claimed!r}")
        return Reply(pid, [a if isinstance(a, np.ndarray) else np.asarray(a) for a in arrays], num_examples, metrics)

    def train(self, rnd: int) -> None:
        """Round ``rnd``: sample, configure, call the clients, validate, aggregate (:class:`RoundSession`)."""
        items = self.session.configure(self.core, rnd, self.partitions, lambda ins, config: self._fit(rnd, ins, config))
        self.session.train(self.core, rnd, *self.session.sort(rnd, items))

    def evaluate(self, rnd: int) -> None:
        """Central evaluation of the core's model after round ``rnd`` (when the core evaluates);
        round 0 scores the initial model, as Flower's run loop does."""
        if self.evaluate_fn is None or not self.core.should_evaluate(rnd):
            return
        self.history.record(rnd)
        if rnd == 0:
            res = self.evaluate_fn(0, [np.array(a, copy=True) for a in self.core.initial_arrays], {})
        else:
            res = self.core.evaluate(rnd, lambda r, arrays: self.evaluate_fn(r, arrays, {}))
        self.session.evaluated(rnd, res)

    # ------------------------------------------------------------------ the run
    def run(self, num_rounds: int, *, state: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rounds ``1..num_rounds`` (or, with ``state`` from ``core.state_dict()``, the rounds after
        it), with central evaluation at the starting round; returns the round records."""
        check_integer("num_rounds", num_rounds, 0)
        if state is not None:
            self.core.load_state_dict(state, num_rounds=num_rounds)
        first = self.core.server_round + 1
        try:
            self.evaluate(first - 1)
            for rnd in range(first, int(num_rounds) + 1):
                self.train(rnd)
                self.evaluate(rnd)
            return self.history.finalize()
        finally:
            self.call.close()

    def global_arrays(self) -> list[np.ndarray]:
        """The core's current global model."""
        return self.core.model_arrays()
