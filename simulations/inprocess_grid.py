"""An in-process Message-API ``Grid``: calls a ``ClientApp`` directly (tests, quick runs; no Ray).

Flower's simulation runtime runs the same ``ClientApp`` on Ray; this grid gives the same replies
in one process, with one persistent ``Context`` per node so ``context.state`` survives rounds.
"""

from __future__ import annotations

from collections.abc import Iterable
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid

__all__ = ["InProcessGrid"]


class InProcessGrid(Grid):
    """A ``Grid`` that calls a ``ClientApp`` in this process (tests, quick runs; no Ray).

    One persistent ``Context`` per node (node ids ``1000 + partition``), so ``context.state``
    survives rounds. A ClientApp that raises gives an error reply, as in Flower's runtime. Sets
    Flower's process-global task identity, which ``Message()`` needs.

    Parameters
    ----------
    client_app : ClientApp
        The app whose handlers answer the messages.
    num_nodes : int
        Number of nodes (partitions ``0..num_nodes-1``), >= 1.
    run_config : dict | None
        The ``run_config`` every node's ``Context`` carries. Defaults to empty.
    """

    def __init__(self, client_app: ClientApp, num_nodes: int, run_config: dict | None = None) -> None:
        from flwr.supercore.run import Run  # internal API (flwr 1.4x)
        from flwr.supercore.task_identity import TaskIdentity  # internal API (flwr 1.4x)

        if num_nodes < 1:
            raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
        self.client_app = client_app
        self._run = Run.create_empty(run_id=1)
        TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 1
        self.contexts = {
            1000 + p: Context(
                run_id=1,
                node_id=1000 + p,
                node_config={"partition-id": p, "num-partitions": num_nodes},
                state=RecordDict(),
                run_config=dict(run_config or {}),
            )
            for p in range(num_nodes)
        }
        self._replies: dict[str, Message] = {}
        self.registration_order: list[int] | None = None

    def set_run(self, run_id: int) -> None:
        pass

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return Message(content=content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def get_nodes(self):
        """The nodes, with registration times in partition order (as Flower's simulation runtime
        registers its SuperNodes); ``registration_order`` overrides the order (tests)."""
        from flwr.proto.node_pb2 import NodeInfo  # the type Grid.get_nodes returns (flwr 1.4x)

        order = self.registration_order or list(self.contexts)
        return [NodeInfo(node_id=n, registered_at=f"2000-01-01T00:00:00.{i:06d}+00:00") for i, n in enumerate(order)]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for m in messages:
            m.metadata.__dict__["_message_id"] = str(uuid4())
            try:
                reply = self.client_app(m, self.contexts[m.metadata.dst_node_id])
            except Exception as err:  # as Flower's runtime: a raising ClientApp gives an error reply
                reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                      reason=f"{type(err).__name__}: {err}"), reply_to=m)
            self._replies[m.metadata.message_id] = reply
            ids.append(m.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in list(message_ids) if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))
