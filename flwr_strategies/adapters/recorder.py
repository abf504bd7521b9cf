"""Per-round records kept by both adapters: what a run sent, received, rejected and scored.

Every adapter keeps a :class:`RoundRecorder` as ``strategy.history``. One record per round:
``round, accuracy, loss, bytes_up, bytes_down, clients, failures, rejected, wall_s, elapsed_s``,
the core's training metrics prefixed ``fit_`` and the central evaluation's metrics unprefixed.
Bytes are the array payloads actually sent and received (``nbytes``, no serialisation headers)
plus ``bytes``-valued config and metric entries.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["RoundRecorder", "arrays_nbytes", "bytes_entries"]


def arrays_nbytes(arrays: Iterable[np.ndarray]) -> int:
    """Total ``nbytes`` of ``arrays``."""
    return int(sum(int(np.asarray(a).nbytes) for a in arrays))


def bytes_entries(values: Mapping[str, Any] | None) -> int:
    """Bytes of the ``bytes``-valued entries of a config or metrics mapping."""
    return int(sum(len(v) for v in (values or {}).values() if isinstance(v, (bytes, bytearray))))


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
                "_start": time.perf_counter(),
            }
        return self._current

    def restart_clock(self, server_round: int) -> None:
        """Start ``server_round``'s wall clock now (after waiting for clients to connect)."""
        self.record(server_round)["_start"] = time.perf_counter()

    def log_failure(self, server_round: int, phase: str, error: str) -> None:
        """Keep one failure or rejection (``phase``: ``fit``, ``evaluate``, ``rejected``)."""
        self.failure_log.append({"round": int(server_round), "phase": phase, "error": error})

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
