"""The round session and its record: one round loop around a core, one record per round.

Both Flower adapters and the in-process driver run every training round through one
:class:`RoundSession` (NumPy in and out, no Flower types): it configures the core's instructions,
takes the replies each path decoded, rejects per ``on_bad_reply``, lets the core validate and
aggregate (:meth:`~flwr_strategies.core.server.ServerCore.train_round`, with the weight cap) and
records the round in its :class:`RoundRecorder` (``history``), so a round runs and is recorded the
same way on every path. One record per round: ``round, accuracy, loss, bytes_up, bytes_down, clients,
failures, rejected, nonfinite, wall_s, elapsed_s``, the core's training metrics prefixed ``fit_``,
federated evaluation prefixed ``federated_`` and central evaluation's metrics unprefixed. Bytes
are the array payloads actually sent and received (``nbytes``, no serialisation headers) plus
``bytes``-valued config and metric entries.

A run that cannot learn stops: when no client update is aggregated in two consecutive rounds
(every sampled client failed or its reply was rejected, in any mix), :meth:`RoundRecorder.training`
raises :class:`NoProgressError` naming the cause (the clients' own error, the rejection) and the
likely fix. Raised inside Flower's ``strategy.start()``, it ends the ServerApp, so Flower reports
the run as failed.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from logging import WARNING
from typing import Any

import numpy as np

from ..common import PARTITION_KEY
from ..core.messages import Instruction, Reply
from ..core.validation import Rejection, ReplyError, check_max_num_examples, check_policy

__all__ = ["RoundRecorder", "RoundSession", "NoProgressError", "payload_nbytes", "evaluation_sample"]

log = logging.getLogger("flwr").log  # Flower's logger (flwr.common.log), without importing Flower

#: Consecutive rounds without any aggregated client update after which a run stops.
STALLED_ROUNDS = 2


class NoProgressError(RuntimeError):
    """No client update was aggregated in :data:`STALLED_ROUNDS` consecutive rounds (every sampled
    client failed or was rejected): the model cannot change, the run stops. The message names the
    rounds, the first cause (a client's own error or the rejection) and the likely fix; ``rounds``
    and ``failure_log`` are the run's records up to the stop (as :class:`RoundRecorder` keeps them)."""

    def __init__(self, message: str, rounds: list[dict[str, Any]] | None = None,
                 failure_log: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.rounds = list(rounds or [])
        self.failure_log = list(failure_log or [])


def payload_nbytes(arrays: Iterable[np.ndarray], values: Mapping[str, Any] | None) -> int:
    """Bytes of one message's payload: the total ``nbytes`` of ``arrays`` plus the ``bytes``-valued
    entries of its config or metrics ``values``."""
    return int(sum(int(np.asarray(a).nbytes) for a in arrays)
               + sum(len(v) for v in (values or {}).values() if isinstance(v, (bytes, bytearray))))


def _nonfinite(rejection: Rejection) -> bool:
    return "NaN or infinite" in rejection.reason or "non-finite" in rejection.reason


def diagnose(rejections: list[Rejection], failures: list[str] = ()) -> str:
    """The likely cause and fix of a round in which no client update was aggregated:
    ``rejections`` are its rejected replies, ``failures`` the errors of its failed clients (as in
    :attr:`RoundRecorder.failure_log`)."""
    failures = list(failures)
    if any(_nonfinite(r) for r in rejections):
        return ("The clients returned NaN or infinite values: local training diverged. Lower the learning rate "
                "(or clip gradients) in the clients' training.")
    diverged = [r for r in rejections if r.reason.startswith("diverged")]
    if diverged:
        return (f"The clients' own training loss ran away ({diverged[0]}): local training diverged. Lower the "
                "learning rate (or clip gradients) in the clients' training.")
    reasons = [r.reason for r in rejections]
    missing = sorted({m.group(1) for m in (re.search(r"metric '([^']+)'(?: \([^)]*\))? is missing", s)
                                            for s in reasons) if m})
    if missing:
        key = missing[0]
        return (f"The replies lack the metric '{key}' that weights the average: return it from the client, e.g. "
                f"MetricRecord({{'{key}': len(trainloader.dataset), ...}}) (or set weighted_by_key to the metric "
                "your clients send).")
    raised = [f for f in failures
              if not any(m in f for m in ("no reply", "did not return within", "unreachable", "timed out", "Timeout"))]
    blown = [f for f in raised if any(m in f for m in ("FloatingPointError", "NaN", "non-finite", "not finite"))]
    if blown:
        return (f"The clients' local training diverged and raised; the first: {blown[0]}. Lower the learning rate "
                "(or clip gradients) in the clients' training.")
    if raised:
        return (f"The clients' training raised an error instead of replying; the first: {raised[0]}. Change what "
                "it names (the clients' settings in the run config or the ClientApp's training code) and run again.")
    if failures:
        return (f"The sampled clients did not reply ({failures[0]}): check that the SuperNodes are running and "
                "connected, and that the round's timeout leaves time for local training.")
    if rejections:
        return (f"First rejection: {rejections[0]}. The replies do not fit what the strategy sent: the ClientApp "
                "must return the arrays it received, trained (same count, shapes and dtypes), with the metrics the "
                "method needs; check that the clients run this strategy's method.")
    return "No client was sampled or replied: check that the SuperNodes are connected."


class RoundRecorder:
    """Round-by-round records of one run.

    Parameters
    ----------
    on_round_end : callable | None (default: None)
        Called with each finished round's record (progress bars, results files).
    """

    def __init__(self, on_round_end: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.on_round_end = on_round_end
        self.rounds: list[dict[str, Any]] = []
        self.failure_log: list[dict[str, Any]] = []
        self._current: dict[str, Any] | None = None
        self._t0 = time.perf_counter()
        self._stalled: list[int] = []

    def __iter__(self):
        return iter(self.rounds)

    def __len__(self) -> int:
        return len(self.rounds)

    def record(self, server_round: int) -> dict[str, Any]:
        """The open record of ``server_round`` (closing the previous round's record first)."""
        if self._current is None or self._current["round"] != server_round:
            self.finish()
            self._current = {
                "round": int(server_round),
                "accuracy": None,
                "loss": None,
                "bytes_up": 0,
                "bytes_down": 0,
                "clients": 0,
                "failures": 0,
                "rejected": 0,
                "nonfinite": 0,
                "_start": time.perf_counter(),
            }
        return self._current

    def log_failure(self, server_round: int, phase: str, error: str) -> None:
        """Keep one failure or rejection (``phase``: ``fit``, ``evaluate``, ``rejected``)."""
        self.failure_log.append({"round": int(server_round), "phase": phase, "error": error})

    def training(self, server_round: int, result: Mapping[str, Any], rejected: list[Rejection],
                 num_replies: int, *, logged: Iterable[int] = (), anonymous: int = 0) -> dict[str, Any]:
        """Record a finished training round and return its metrics.

        ``result`` is the core's :class:`~flwr_strategies.core.server.RoundResult` (its
        ``rejections`` are the core's), ``rejected`` the replies the adapter rejected before the
        core saw them and ``num_replies`` the number of replies handed to the core. ``logged``
        are the partitions whose failure the adapter has already logged (an error reply) and
        ``anonymous`` the failures it logged without a partition (Flower's legacy exceptions).
        Every other partition the core counts as failed (``failed_partitions``: a node that never
        answered, a peer that was not connected) is logged here, unless anonymous failures make
        the attribution ambiguous. Raises :class:`NoProgressError` when no client update was
        aggregated in this round and the round before (failed or rejected, any mix).
        """
        core_rejections = list(getattr(result, "rejections", []))
        rejections = list(rejected) + core_rejections
        for r in rejections:
            log(WARNING, "Round %s: rejected reply from %s", server_round, r)
            self.log_failure(server_round, "rejected", str(r))
        explained = {int(p) for p in logged} | {r.partition_id for r in rejections if r.partition_id is not None}
        silent = [p for p in result.get("failed_partitions", []) if p not in explained]
        if not anonymous:
            for pid in silent:
                log(WARNING, "Round %s: partition %s did not reply", server_round, pid)
                self.log_failure(server_round, "fit", f"partition {pid}: no reply (its node did not answer or "
                                                      "was not connected)")
        metrics = dict(result)
        metrics["rejected"] = len(rejections)
        metrics["failures"] = int(metrics.get("failures", 0)) + sum(1 for r in rejected if r.partition_id is None)
        rec = self.record(server_round)
        rec["failures"] = int(metrics["failures"])
        rec["rejected"] = len(rejections)
        rec["nonfinite"] = sum(1 for r in rejections if _nonfinite(r))
        for key, value in metrics.items():
            rec[f"fit_{key}"] = value
        sampled = set(metrics.get("sampled_partitions") or ())
        aggregated = len(sampled - set(metrics.get("failed_partitions") or ())) if sampled else \
            num_replies - len(core_rejections)
        if aggregated <= 0 and (sampled or rejections or metrics["failures"]):
            self.not_aggregated(server_round, rejections)
        else:
            self._stalled.clear()
        return metrics

    def not_aggregated(self, server_round: int, rejections: Iterable[Any] = (), why: str | None = None) -> None:
        """Count round ``server_round`` as one in which no client update was aggregated (``why``:
        the reason, when it is not that every client failed or was rejected); raises
        :class:`NoProgressError` when the round before was one too."""
        rejections = list(rejections)
        failures = [e["error"] for e in self.failure_log if e["round"] == int(server_round) and e["phase"] == "fit"]
        self._stalled.append(int(server_round))
        if len(self._stalled) < STALLED_ROUNDS:
            return
        first = self._stalled[-STALLED_ROUNDS]
        if why is not None:
            what = why
        elif rejections and not failures:
            what = "every client reply was rejected"
        elif failures and not rejections:
            what = "every sampled client failed"
        else:
            what = "every sampled client failed or its reply was rejected"
        raise NoProgressError(
            f"rounds {first} to {server_round}: {what} ({len(failures)} failed, {len(rejections)} rejected in "
            f"round {server_round}), so no client update was aggregated and the model has not changed since "
            f"round {first - 1}; stopping the run. {diagnose(rejections, failures)}",
            self.snapshot(), self.failure_log,
        )

    def finish(self) -> None:
        """Close the open record (called automatically when the next round starts)."""
        rec = self._current
        if rec is None:
            return
        now = time.perf_counter()
        rec["wall_s"] = round(now - rec.pop("_start"), 6)
        rec["elapsed_s"] = round(now - self._t0, 6)
        self.rounds.append(rec)
        self._current = None
        if self.on_round_end is not None:
            self.on_round_end(rec)

    def snapshot(self) -> list[dict[str, Any]]:
        """Finished records plus the open one (without its private keys)."""
        out = list(self.rounds)
        if self._current is not None:
            out.append({k: v for k, v in self._current.items() if not k.startswith("_")})
        return out

    def finalize(self) -> list[dict[str, Any]]:
        """Close the last round and return every record."""
        self.finish()
        return self.rounds


def evaluation_sample(ids: list[int], server_round: int, fraction: float, minimum: int, seed: int) -> list[int]:
    """The ``max(int(len(ids) * fraction), minimum)`` of ``ids`` (at most all) that evaluate in
    ``server_round`` (Flower's FedAvg count), seeded by ``(seed, server_round)``, ascending."""
    k = min(len(ids), max(int(len(ids) * fraction), minimum))
    rng = np.random.default_rng([seed, server_round, 0xE7A1])
    return [ids[int(i)] for i in np.sort(rng.choice(len(ids), size=k, replace=False))]


class RoundSession:
    """The training round around a core: :meth:`configure`, then (the path delivers the
    instructions and decodes the replies) :meth:`sort` and :meth:`train`.

    ``history`` is the run's :class:`RoundRecorder`, ``name`` who runs the rounds (named in
    errors); ``on_bad_reply`` and ``max_num_examples`` are
    :meth:`~flwr_strategies.core.server.ServerCore.train_round`'s.
    """

    def __init__(self, history: RoundRecorder, name: str, on_bad_reply: str = "drop",
                 max_num_examples: int | Mapping[int, int] | None = None) -> None:
        self.history, self.name = history, name
        self.on_bad_reply = check_policy(on_bad_reply)
        self.max_num_examples = check_max_num_examples(max_num_examples, f"{name}: max_num_examples")
        self.sampled: dict[int, list[int]] = {}  # round -> partitions, from configure to train

    def configure(self, core: Any, server_round: int, available: Iterable[int],
                  send: Callable[[Instruction, dict[str, Any]], Any], base: Mapping[str, Any] | None = None,
                  per_partition: Callable[[int, int], Mapping[str, Any]] | None = None) -> list:
        """``send(instruction, config)`` for each partition the core samples from ``available``
        (``config``: ``base``, ``server-round``, the instruction's, ``per_partition(partition, round)``,
        ``partition-id``); then the core may release the instructions' buffers. Returns what ``send``
        returned."""
        rec = self.history.record(server_round)
        instructions = core.configure_train(server_round, core.select(server_round, available))
        self.sampled[server_round] = [ins.partition_id for ins in instructions]
        out = []
        for ins in instructions:
            config = {**(base or {}), "server-round": server_round, **ins.config,
                      **(per_partition(ins.partition_id, server_round) if per_partition else {}),
                      PARTITION_KEY: int(ins.partition_id)}
            rec["bytes_down"] += payload_nbytes(ins.arrays, config)
            out.append(send(ins, config))
        instructions = ins = None  # the start points may be views of a buffer the core now releases
        core.instructions_sent(server_round)
        rec["clients"] = len(out)
        return out

    def sort(self, server_round: int, items: Iterable[Reply | Rejection | int]) -> tuple[list, list, list]:
        """``(replies, rejected, failed)`` of the decoded ``items`` (each a :class:`Reply`, a
        :class:`Rejection` or a failed partition id); ``"raise"`` raises on the first rejection."""
        out: tuple[list, list, list] = ([], [], [])
        for item in items:
            out[0 if isinstance(item, Reply) else 1 if isinstance(item, Rejection) else 2].append(item)
        self.history.record(server_round)["bytes_up"] += sum(payload_nbytes(r.arrays, r.metrics) for r in out[0])
        if out[1] and self.on_bad_reply == "raise":
            raise ReplyError(f"{self.name} round {server_round}: {out[1][0]}")
        return out

    def train(self, core: Any, server_round: int, replies: list[Reply], rejected: list[Rejection],
              failed: list[int], *, logged: Iterable[int] = (), anonymous: int = 0) -> tuple[Any, dict[str, Any]]:
        """The core's validated, aggregated round (``train_round``) recorded (:meth:`RoundRecorder.training`,
        whose ``logged`` and ``anonymous`` these are): ``(result, metrics)``."""
        result = core.train_round(server_round, replies, sampled=self.sampled.pop(server_round, []), failed=failed,
                                  on_bad_reply=self.on_bad_reply, max_num_examples=self.max_num_examples)
        return result, self.history.training(server_round, result, rejected, len(replies),
                                             logged=[*failed, *logged], anonymous=anonymous)

    def record(self, server_round: int, metrics: Mapping[str, Any] | None, prefix: str = "") -> None:
        """Add ``metrics`` to the round's record, each key prefixed (``fit_``, ``federated_``)."""
        self.history.record(server_round).update({f"{prefix}{k}": v for k, v in (metrics or {}).items()})

    def evaluated(self, server_round: int, res: tuple[float, Mapping[str, Any]] | None):
        """Record central evaluation's ``(loss, metrics)`` (None: nothing ran); returns it as ``(float, dict)``."""
        if res is None:
            return None
        loss, metrics = float(res[0]), dict(res[1] or {})
        self.record(server_round, {"loss": loss, **metrics})
        return loss, metrics
