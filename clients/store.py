"""Client state that outlives a Flower run: the node keeps it on its own disk, keyed to the run.

A client that keeps state between rounds (SCAFFOLD's control variate ``c_i``, FedMUD's ``W_base``,
DO-ADP's agent ``x, m, xhat`` and its round ledger, the DO-ADP baselines' private variables) holds it
in its node's ``context.state``, which Flower keeps for one Flower run only. A run resumed from a
strategy's checkpoint after a crash is a new Flower run, whose ``context.state`` is empty. This module
keeps that state where the new run finds it again:

- every strategy draws a client-state key once (32 hex digits), carries it in its checkpoint and
  sends it in each train config (:data:`~flwr_strategies.common.CLIENT_STATE_KEY`); a resumed run
  also sends the checkpoint's round ``k`` (:data:`~flwr_strategies.common.CLIENT_STATE_RESUMED`) and
  whether the partition trained at or before it (:data:`~flwr_strategies.common.CLIENT_STATE_KEPT`);
- :func:`save_client_state` (after a train reply is built) writes the node's state records to
  ``<dir>/<key>/partition-<id>/round-<r>.npz`` atomically
  (:func:`~flwr_strategies.core.state.save_state`), keeping the two newest rounds;
- :func:`restore_client_state` (before training) refills an empty ``context.state`` from the newest
  file at or before round ``k``, so the resumed run continues bit for bit;
- :func:`client_state_mod` does both around a ``ClientApp``'s train messages, for the legacy API
  (``ClientApp(client_fn=..., mods=[client_state_mod])``: the ``fitins.config`` of a legacy strategy's
  fit instruction) as for the Message API (the message's ``config``).

``<dir>`` is the node's own: ``client-state-dir`` in its node config (``flower-supernode
--node-config "... client-state-dir='/var/lib/node-state'"``), else the environment variable
``FLWR_STRATEGIES_CLIENT_STATE_DIR`` where the ClientApp runs; never anything the server sends.
The node's settings (DO-ADP's secret seed, budget and consent) are not written: they come from the
node config every round. A node without a folder keeps nothing; when a resumed run then finds
that the client of a partition that had trained keeps state, the client refuses the round with an
error naming the records it lost, instead of silently starting them over.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict

from flwr_strategies.common import CLIENT_STATE_KEPT, CLIENT_STATE_KEY, CLIENT_STATE_RESUMED, PARTITION_KEY
from flwr_strategies.core.state import load_state, save_state

__all__ = ["STATE_DIR_ENV", "STATE_DIR_KEY", "MARKER", "client_state_mod", "refusing_lost_state",
           "restore_client_state", "save_client_state", "state_dir"]

#: Node-config key naming the folder where the node keeps its clients' state.
STATE_DIR_KEY = "client-state-dir"
#: Environment variable naming that folder when the node config does not.
STATE_DIR_ENV = "FLWR_STRATEGIES_CLIENT_STATE_DIR"
#: ``context.state`` record of this module: the run key the state belongs to and the round it was
#: restored from (0: nothing restored in this Flower run).
MARKER = "client-state"
#: Node settings in ``context.state`` that are written from the node config every round, not kept.
NODE_SETTINGS = ("doadp-secret", "doadp-consent", "doadp-budget")
_TOKEN = re.compile(r"[0-9a-f]{32}")
_FILE = re.compile(r"round-(\d+)\.npz")
KEEP = 2


def state_dir(node_config: dict[str, Any]) -> Path | None:
    """The node's client-state folder: node config ``client-state-dir``, else the environment's
    ``FLWR_STRATEGIES_CLIENT_STATE_DIR``; None when neither is set."""
    raw = str(node_config.get(STATE_DIR_KEY, "") or os.environ.get(STATE_DIR_ENV, "") or "")
    return Path(raw) if raw else None


def _key(config: dict[str, Any]) -> str | None:
    key = config.get(CLIENT_STATE_KEY)
    if key is None:
        return None
    if not isinstance(key, str) or not _TOKEN.fullmatch(key):
        raise ValueError(f"train config {CLIENT_STATE_KEY} = {key!r:.80}: expected 32 lowercase hex digits")
    return key


def _partition(context: Context, config: dict[str, Any]) -> int:
    return int(context.node_config.get(PARTITION_KEY, config.get(PARTITION_KEY, 0)))


def _folder(context: Context, config: dict[str, Any], key: str) -> Path | None:
    root = state_dir(context.node_config)
    return None if root is None else root / key / f"partition-{_partition(context, config)}"


def _rounds(folder: Path | None) -> dict[int, Path]:
    if folder is None or not folder.is_dir():
        return {}
    return {int(m.group(1)): p for p in folder.iterdir() if (m := _FILE.fullmatch(p.name))}


def _kept(state: RecordDict) -> dict[str, Any]:
    """The client's state records of a node's ``context.state`` as a :func:`save_state` dict."""
    out: dict[str, Any] = {}
    for name, record in state.items():
        if name == MARKER or name in NODE_SETTINGS:
            continue
        if isinstance(record, ArrayRecord):
            out[name] = {"kind": "arrays", "names": list(record.keys()),
                         "values": [record[k].numpy() for k in record.keys()]}
        elif isinstance(record, (ConfigRecord, MetricRecord)):
            kind = "config" if isinstance(record, ConfigRecord) else "metrics"
            out[name] = {"kind": kind, "values": dict(record)}
    return out


def _refill(context: Context, saved: dict[str, Any]) -> None:
    for name, entry in saved.items():
        if entry["kind"] == "arrays":
            context.state[name] = ArrayRecord({k: Array.from_numpy_ndarray(v)
                                               for k, v in zip(entry["names"], entry["values"])})
        elif entry["kind"] == "config":
            context.state[name] = ConfigRecord(entry["values"])
        else:
            context.state[name] = MetricRecord(entry["values"])


def restore_client_state(context: Context, config: dict[str, Any]) -> int:
    """Before a train round: when ``context.state`` does not yet belong to the run the config's
    client-state key names (the first round of this node in a new Flower run), refill it from the
    node's newest saved round at or before the resumed checkpoint's round (or before this round).
    Returns the round restored (0: none). A config without a key (another strategy) changes nothing.

    Parameters
    ----------
    context : Context
        The node's context (its ``node_config`` names the folder, :func:`state_dir`; its ``state``
        is refilled).
    config : dict
        The train message's config: ``client-state-key`` (32 lowercase hex digits, else
        ``ValueError``), ``server-round`` and, in a resumed run, ``client-state-resumed``.
    """
    key = _key(config)
    if key is None:
        return 0
    if MARKER in context.state and context.state[MARKER]["key"] == key:
        return int(context.state[MARKER]["round"])
    resumed = int(config.get(CLIENT_STATE_RESUMED, 0))
    upto = resumed if resumed else int(config.get("server-round", 1)) - 1
    rounds = {r: p for r, p in _rounds(_folder(context, config, key)).items() if r <= upto}
    restored = max(rounds, default=0)
    if restored:
        _refill(context, load_state(rounds[restored]))
    kept = int(config.get(CLIENT_STATE_KEPT, 0)) if resumed else 0
    context.state[MARKER] = ConfigRecord({"key": key, "round": restored, "resumed": resumed, "kept": kept})
    return restored


def _lost(context: Context, config: dict[str, Any], key: str) -> tuple[str, str] | None:
    """In a resumed run whose checkpoint's round this partition had trained by, but whose node
    restored nothing: what was lost, and why (no folder, or no file in it); else None."""
    marker = context.state[MARKER]
    if not (marker["resumed"] and marker["kept"] and not marker["round"]):
        return None
    folder = _folder(context, config, key)
    where = (f"{folder} holds no file of it" if folder is not None else
             f"the node has no folder for it (--node-config \"{STATE_DIR_KEY}='...'\" or the environment "
             f"variable {STATE_DIR_ENV}, set before the run that was checkpointed)")
    return (f"this run resumes a checkpoint of round {marker['resumed']}, in which partition "
            f"{_partition(context, config)} had trained, but the node kept no client state for it", where)


def save_client_state(context: Context, config: dict[str, Any]) -> None:
    """After a train round (once the reply is built): write the client's state records to the
    node's folder for this round (atomically; the two newest rounds are kept).

    In a resumed run, a client that keeps state, of a partition that trained at or before the
    checkpoint's round, but had nothing restored (the node has no folder, or the folder lacks the
    files) raises ``RuntimeError`` naming the records: the round is refused, since going on would
    silently start that state over. A partition that had not trained starts empty, as in a
    straight run.

    Parameters
    ----------
    context : Context
        The node's context, after the client committed this round's state to ``context.state``.
    config : dict
        The same train config :func:`restore_client_state` was given.
    """
    key = _key(config)
    if key is None:
        return
    if MARKER not in context.state or context.state[MARKER]["key"] != key:
        restore_client_state(context, config)
    kept = _kept(context.state)
    lost = _lost(context, config, key)
    if kept and lost is not None:
        raise RuntimeError(
            f"{lost[0]}: its client keeps {', '.join(sorted(kept))} in context.state between rounds, which a new "
            f"Flower run starts empty, and {lost[1]}. Going on would silently start that state over: give the node "
            "its folder back, or run again from round 0")
    folder = _folder(context, config, key)
    if folder is None or not kept:
        return
    rnd = int(config.get("server-round", 0))
    save_state(folder / f"round-{rnd}.npz", kept)
    files = _rounds(folder)
    for old in sorted(files)[:-KEEP]:
        files[old].unlink(missing_ok=True)


def client_state_mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """A Flower client mod that keeps the node's client state across Flower runs around every train
    message: :func:`restore_client_state` before the ``ClientApp`` handles it,
    :func:`save_client_state` once it replied. Other messages pass through unchanged.

    The legacy API's ``ClientApp(client_fn=...)`` has no train handler of its own to call them from:
    give it ``mods=[client_state_mod]``. The train config is the legacy fit instruction's
    (``fitins.config``), else the Message API's (``config``); a reply that is an error saves nothing.
    A client that raises in a resumed round whose state the node lost (see :func:`save_client_state`)
    raises ``RuntimeError`` naming the partition, the round and the missing folder or files, with the
    client's own error.
    """
    if msg.metadata.message_type != MessageType.TRAIN:
        return call_next(msg, context)
    records = msg.content.config_records
    config = dict(records.get("fitins.config", records.get("config", {})))
    restore_client_state(context, config)
    try:
        reply = call_next(msg, context)
    except Exception as err:
        key = _key(config)
        lost = _lost(context, config, key) if key is not None else None
        if lost is None:
            raise
        raise RuntimeError(f"{lost[0]} ({lost[1]}), and its client failed without it: {type(err).__name__}: {err}. "
                           "Give the node its folder back, or run again from round 0") from err
    if not reply.has_error():
        save_client_state(context, config)
    return reply


@contextmanager
def refusing_lost_state(state: RecordDict | None, config: dict[str, Any], partition_id: int) -> Iterator[None]:
    """Around a client's ``fit`` on a node where no client-state store ran (a legacy
    ``ClientApp(client_fn=...)`` without :func:`client_state_mod`): in a resumed run, a client of a
    partition that trained at or before the checkpoint's round, which starts the round with no state
    records in ``state`` and ends it with some, raises ``RuntimeError`` naming them, since its state
    was lost and going on would silently start it over; the records it wrote are taken back, so every
    later round is refused the same way. Does nothing where the store ran (it restores or refuses
    itself), outside a resumed run, for a client that keeps nothing, or when ``state`` still holds
    the client's records (the same nodes continue: nothing was lost).

    Parameters
    ----------
    state : RecordDict | None
        The node's ``context.state`` the client keeps its records in (None: it keeps none).
    config : dict
        The round's train config.
    partition_id : int
        The client's partition (named in the error).
    """
    key = _key(config)
    watch = (key is not None and state is not None and bool(int(config.get(CLIENT_STATE_RESUMED, 0)))
             and bool(int(config.get(CLIENT_STATE_KEPT, 0))) and not (MARKER in state and state[MARKER]["key"] == key)
             and not _kept(state))
    yield
    kept = _kept(state) if watch else {}
    if kept:
        for name in kept:
            del state[name]
        raise RuntimeError(
            f"this run resumes a checkpoint of round {int(config[CLIENT_STATE_RESUMED])}, in which partition "
            f"{partition_id} had trained, but its client keeps {', '.join(sorted(kept))} in context.state between "
            "rounds, which a new Flower run starts empty, and its ClientApp runs no client-state store to restore "
            "them. Going on would silently start that state over: build the ClientApp with ClientApp(client_fn=..., "
            "mods=[client_state_mod]) (from flwr_strategies.clients.store), or run again from round 0")
