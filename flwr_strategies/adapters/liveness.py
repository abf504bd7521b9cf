"""Nodes a round found unreachable are left out of later rounds until they answer again (Message API).

A node is unreachable when a round sent it an instruction and it sent no reply before the round's
timeout, or when Flower's SuperLink answered for it with its own error reply (``NODE_UNAVAILABLE``:
the node missed its heartbeats; ``MESSAGE_UNAVAILABLE`` / ``REPLY_MESSAGE_UNAVAILABLE``: the
instruction or its reply expired). Flower keeps listing a node in ``grid.get_node_ids()`` until its
heartbeats have been missing for twice their interval (about a minute after its SuperNode died), and
for as long as its SuperNode sends heartbeats while its ClientApp hangs: every round that sends it an
instruction in that time waits the full timeout for it.

:class:`UnreachableNodes` remembers such nodes. Each later round leaves them out and re-checks each
one without waiting: it sends the node one ``query.partition`` message and reads the reply in a later
round. The node rejoins the rounds after that reply arrives (any reply except the SuperLink's
unavailability error: a ClientApp that raises is alive), or when Flower lists it again after it had
dropped it from ``grid.get_node_ids()`` (its SuperNode reconnected).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from logging import INFO, WARNING
from typing import Any

from flwr.app import Message
from flwr.common import log
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid

__all__ = ["UNREACHABLE_CODES", "UnreachableNodes", "is_unreachable_reply"]

#: Error codes of the replies Flower's SuperLink sends itself for a node it could not reach.
UNREACHABLE_CODES = frozenset({ErrorCode.MESSAGE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
                               ErrorCode.NODE_UNAVAILABLE})


def is_unreachable_reply(msg: Message) -> bool:
    """True when ``msg`` is the SuperLink's error reply for an unreachable node or an expired message."""
    return msg.has_error() and int(msg.error.code) in UNREACHABLE_CODES


@dataclass
class Unreachable:
    """One unreachable node: its partition, the round that found it, why, and its pending re-check."""

    partition: int
    since: int
    reason: str
    recheck: str | None = None  # message id of the re-check sent and not answered yet
    unlisted: bool = False  # Flower dropped it from grid.get_node_ids() since


class UnreachableNodes:
    """The nodes rounds found unreachable, each left out until it answers again.

    Parameters
    ----------
    recheck_message : callable
        ``node_id -> Message``: the small message that re-checks a node (the strategy's
        ``query.partition`` message; every reply but the SuperLink's unavailability error counts
        as an answer).
    """

    def __init__(self, recheck_message: Callable[[int], Message]) -> None:
        self.recheck_message = recheck_message
        self.nodes: dict[int, Unreachable] = {}

    def note(self, server_round: int, sent: Iterable[tuple[Any, int]], replies: Iterable[Message]) -> None:
        """Mark the nodes that ``sent`` (each pushed instruction's metadata and partition) reached
        in vain: no reply among ``replies`` or the SuperLink's unavailability error."""
        by_instruction = {m.metadata.reply_to_message_id: m for m in replies}
        for meta, pid in sent:
            node = int(meta.dst_node_id)
            reply = by_instruction.get(meta.message_id)
            if reply is None:
                reason = "no reply before the round's timeout"
            elif is_unreachable_reply(reply):
                reason = reply.error.reason
            else:
                continue
            if node not in self.nodes:
                self.nodes[node] = Unreachable(int(pid), int(server_round), reason)
                log(WARNING, "Round %s: node %s (partition %s) is unreachable (%s); later rounds leave it out until "
                             "it answers again", server_round, node, pid, reason)

    def reachable(self, grid: Grid, connected: Iterable[int], server_round: int) -> set[int]:
        """``connected`` (Flower's node ids) less the nodes still unreachable, after re-checking
        them: the replies to earlier re-checks are read (an answer brings the node back), and
        every unreachable node that Flower lists and that has no re-check pending gets one. Never
        waits for a reply."""
        connected = {int(n) for n in connected}
        pending = {u.recheck: node for node, u in self.nodes.items() if u.recheck is not None}
        answered: dict[int, bool] = {}
        if pending:
            for reply in grid.pull_messages(list(pending)):
                node = pending.get(reply.metadata.reply_to_message_id)
                if node is not None:
                    answered[node] = answered.get(node, False) or not is_unreachable_reply(reply)
        for node, u in list(self.nodes.items()):
            listed = node in connected
            if node in answered:
                u.recheck = None
                if answered[node]:
                    self._rejoin(node, server_round, "it answered a re-check")
                    continue
            if listed and u.unlisted:
                self._rejoin(node, server_round, "Flower lists it again")
                continue
            u.unlisted = u.unlisted or not listed
            if listed and u.recheck is None:
                ids = list(grid.push_messages([self.recheck_message(node)]))
                u.recheck = ids[0] if ids and ids[0] else None
        return connected - set(self.nodes)

    def left_out(self) -> dict[int, Unreachable]:
        """``{partition: Unreachable}`` of the nodes left out now."""
        return {u.partition: u for u in self.nodes.values()}

    def _rejoin(self, node: int, server_round: int, why: str) -> None:
        u = self.nodes.pop(node)
        log(INFO, "Round %s: node %s (partition %s, unreachable since round %s) rejoins: %s", server_round, node,
            u.partition, u.since, why)
