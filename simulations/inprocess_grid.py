"""An in-process Message-API ``Grid``: calls a ``ClientApp`` directly (tests, quick runs; no Ray).

Flower's simulation runtime runs the same ``ClientApp`` on Ray; this grid gives the same replies
in one process, with one persistent ``Context`` per node so ``context.state`` survives rounds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid

__all__ = ["InProcessGrid"]


def _enter_flower_task(run_id: int, node_id: int) -> None:
    """Give this process the task identity that Flower's runtime gives a ServerApp process.

    ``Message(content, dst_node_id, message_type)``, which strategies (Flower's own among them) call
    to build their instructions, reads the sender's run and node from it. Flower's runtime sets it
    before it calls a ServerApp and offers no public call for it (flwr 1.41 to 1.43), so a grid
    that stands in for the runtime sets it the same way.
    """
    from flwr.supercore.task_identity import TaskIdentity  # Flower's runtime state, no public setter

    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = run_id, 1, node_id


class InProcessGrid(Grid):
    """A ``Grid`` that calls a ``ClientApp`` in this process (tests, quick runs; no Ray).

    One persistent ``Context`` per node (node ids ``1000 + partition``), so ``context.state``
    survives rounds. A ClientApp that raises gives an error reply, as in Flower's runtime. Messages
    are answered one at a time, also when Flower's legacy compatibility layer sends them from one
    thread per client: in CPython 3.11, code that two threads compile at once can fail with
    ``SystemError: AST constructor recursion depth mismatch`` (CPython gh-106905). Like
    Flower's runtime, it gives the process the task identity that ``Message()`` reads, and it gives
    each message an id when it is pushed.

    Parameters
    ----------
    client_app : ClientApp
        The app whose handlers answer the messages.
    num_nodes : int
        Number of nodes (partitions ``0..num_nodes-1``), >= 1.
    run_config : dict | None
        The ``run_config`` every node's ``Context`` carries. Defaults to empty.
    """

    run_id = 1
    node_id = 1  # the sender of the ServerApp's messages (Flower's SuperLink node)

    def __init__(self, client_app: ClientApp, num_nodes: int, run_config: dict | None = None) -> None:
        if num_nodes < 1:
            raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
        self.client_app = client_app
        _enter_flower_task(self.run_id, self.node_id)
        self._run: Any = None
        self.contexts = {
            1000 + p: Context(run_id=self.run_id, node_id=1000 + p,
                              node_config={"partition-id": p, "num-partitions": num_nodes}, state=RecordDict(),
                              run_config=dict(run_config or {}))
            for p in range(num_nodes)
        }
        self._replies: dict[str, Message] = {}
        self._lock = threading.Lock()
        self.registration_order: list[int] | None = None

    def set_run(self, run: Any) -> None:
        """Keep the ``Run`` record a runtime hands over (returned by :attr:`run`)."""
        self._run = run

    @property
    def run(self) -> Any:
        """The run's record. Flower's legacy compatibility layer (``start_grid``) reads its
        ``run_id``; without :meth:`set_run`, an empty record of run :attr:`run_id`."""
        if self._run is None:
            from flwr.supercore.run import Run  # the type of Grid.run (flwr 1.41 to 1.43)

            self._run = Run.create_empty(run_id=self.run_id)
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def get_nodes(self):
        """The nodes, with registration times in partition order (as Flower's simulation runtime
        registers its SuperNodes); ``registration_order`` overrides the order (tests)."""
        order = self.registration_order or list(self.contexts)
        nodes = {node.node_id: node for node in super().get_nodes()}  # Flower's NodeInfo records
        for i, node_id in enumerate(order):
            nodes[node_id].registered_at = f"2000-01-01T00:00:00.{i:06d}+00:00"
        return [nodes[n] for n in order]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        with self._lock:
            for m in messages:
                m.metadata.__dict__["_message_id"] = str(uuid4())  # as Flower's own in-memory grid does
                try:
                    reply = self.client_app(m, self.contexts[m.metadata.dst_node_id])
                except Exception as err:  # as Flower's runtime: a raising ClientApp gives an error reply
                    reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                          reason=f"{type(err).__name__}: {err}"), reply_to=m)
                self._replies[m.metadata.message_id] = reply
                ids.append(m.metadata.message_id)
        return ids

    def pull_messages(self, reply_to_message_ids: Iterable[str] | None = None, *,
                      message_ids: Iterable[str] | None = None) -> Iterable[Message]:
        """The replies to the given messages (all waiting replies when none are given).
        ``message_ids`` is the keyword of flwr 1.41 and 1.42, ``reply_to_message_ids`` of 1.43."""
        if reply_to_message_ids is not None and message_ids is not None:
            raise ValueError("pass reply_to_message_ids or message_ids, not both")
        wanted = reply_to_message_ids if reply_to_message_ids is not None else message_ids
        with self._lock:
            ids = list(self._replies) if wanted is None else [i for i in wanted if i in self._replies]
            return [self._replies.pop(i) for i in ids]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))
