"""A transparent wrapper that measures what a strategy sends and receives, round by round.

:class:`MeteredStrategy` wraps any legacy Flower strategy (``flwr.server.strategy.Strategy``). The
project's own strategies keep these records themselves (``strategy.history``, see
:mod:`flwr_strategies.adapters.recorder`); the runner uses this wrapper for methods still registered
with only a legacy ``build_strategy``, and it serves any other Flower strategy the same way. It does
not change the algorithm; it makes runs reproducible and observable:

- fit and evaluate results are sorted by the clients' partition ids before the wrapped strategy
  aggregates them (Flower returns them in completion order);
- a result whose arrays hold NaN or infinity is moved to the failures (``nonfinite`` is counted);
- bytes are counted from the parameter tensors actually put into ``FitIns``/``EvaluateIns`` (down)
  and ``FitRes`` (up), plus ``bytes``-valued config/metric entries;
- per round it records ``round, accuracy, loss, bytes_up, bytes_down, wall_s, failures`` and every
  metric the wrapped strategy returns from ``aggregate_fit`` (prefixed ``fit_``) and ``evaluate``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from logging import WARNING
from typing import Any

import numpy as np
from flwr.common import (
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    Parameters,
    Scalar,
    log,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from .common import PARTITION_KEY, _npy_header_length, payload_bytes, scalar_dict_bytes


def _sort_key(item: tuple[ClientProxy, Any]) -> tuple[int, int | str]:
    proxy, res = item
    metrics = getattr(res, "metrics", None) or {}
    if PARTITION_KEY in metrics:
        return (0, int(metrics[PARTITION_KEY]))
    return (1, str(proxy.cid))


_DESCR = re.compile(rb"'descr':\s*'([^']+)'")


def _is_finite(parameters: Parameters) -> bool:
    """True when no floating tensor holds NaN/inf; reads the ``.npy`` buffers without copying."""
    for blob in parameters.tensors:
        hlen = _npy_header_length(blob)
        match = _DESCR.search(blob[:hlen]) if hlen else None
        if match is None:  # not a plain .npy tensor: fall back to a full parse
            arrays = parameters_to_ndarrays(Parameters(tensors=[blob], tensor_type=parameters.tensor_type))
        else:
            arrays = [np.frombuffer(blob, dtype=np.dtype(match.group(1).decode()), offset=hlen)]
        for arr in arrays:
            if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
                return False
    return True


class MeteredStrategy(Strategy):
    """Wrap ``inner`` and record per-round accuracy, loss, bytes, wall time and failures.

    Parameters
    ----------
    inner : Strategy
        The strategy that does the work. All calls are delegated to it.
    reject_nonfinite : bool
        Treat a client result whose floating arrays contain NaN/inf as a failure of that client,
        so it never reaches aggregation. Defaults to True.
    on_round_end : Callable[[dict], None] | None
        Called with each finished round's record (for progress bars). Defaults to None.
    """

    def __init__(
        self,
        inner: Strategy,
        *,
        reject_nonfinite: bool = True,
        on_round_end: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        super().__init__()
        self.inner = inner
        self.reject_nonfinite = reject_nonfinite
        self.on_round_end = on_round_end
        self.rounds: list[dict[str, Any]] = []
        self.failure_log: list[dict[str, Any]] = []
        self._current: dict[str, Any] | None = None
        self._t0 = time.perf_counter()
        self.latest_parameters: Parameters | None = None  # global model passed to evaluate() last

    def __repr__(self) -> str:
        return f"MeteredStrategy({self.inner!r})"

    # -- bookkeeping -----------------------------------------------------------------------
    def _record(self, server_round: int) -> dict[str, Any]:
        if self._current is None or self._current["round"] != server_round:
            self._finish()
            self._current = {
                "round": server_round,
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

    def _finish(self) -> None:
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

    def finalize(self) -> list[dict[str, Any]]:
        """Close the last round and return all round records."""
        self._finish()
        return self.rounds

    def _split_nonfinite(self, server_round, results, failures):
        if not self.reject_nonfinite:
            return results, failures
        kept = []
        failures = list(failures)
        for proxy, res in results:
            if _is_finite(res.parameters):
                kept.append((proxy, res))
            else:
                rec = self._record(server_round)
                rec["nonfinite"] += 1
                rec["rejected"] += 1
                failures.append((proxy, res))
        return kept, failures

    def _log_failures(self, server_round: int, failures: list, phase: str) -> None:
        for f in failures:
            if isinstance(f, BaseException):
                msg = f"{type(f).__name__}: {f}"
            else:
                proxy, res = f
                pid = (res.metrics or {}).get(PARTITION_KEY, "?")
                if res.status.code.name == "OK":
                    msg = f"client {proxy.cid} (partition {pid}) sent NaN/inf values; treated as failed"
                else:
                    msg = f"client {proxy.cid} (partition {pid}): {res.status.code.name} {res.status.message}"
            log(WARNING, "Round %s %s failure: %s", server_round, phase, msg)
            self.failure_log.append({"round": server_round, "phase": phase, "error": msg})

    # -- Strategy interface ----------------------------------------------------------------
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return self.inner.initialize_parameters(client_manager)

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        rec = self._record(server_round)
        instructions = self.inner.configure_fit(server_round, parameters, client_manager)
        ready = getattr(client_manager, "ready_at", None)
        if ready is not None and ready > rec["_start"]:  # time spent waiting for clients to connect
            rec["wait_s"] = round(ready - rec["_start"], 6)
            rec["_start"] = ready
        rec["clients"] = len(instructions)
        rec["bytes_down"] += sum(
            payload_bytes(ins.parameters) + scalar_dict_bytes(ins.config) for _, ins in instructions
        )
        return instructions

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        rec = self._record(server_round)
        rec["bytes_up"] += sum(
            payload_bytes(res.parameters) + scalar_dict_bytes(res.metrics) for _, res in results
        )
        results = sorted(results, key=_sort_key)
        results, failures = self._split_nonfinite(server_round, results, failures)
        rec["failures"] += len(failures)
        if failures:
            self._log_failures(server_round, failures, "fit")
        params, metrics = self.inner.aggregate_fit(server_round, results, failures)
        for key, value in (metrics or {}).items():
            rec[f"fit_{key}"] = value
        return params, metrics

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, EvaluateIns]]:
        instructions = self.inner.configure_evaluate(server_round, parameters, client_manager)
        if instructions:
            rec = self._record(server_round)
            rec["bytes_down"] += sum(
                payload_bytes(ins.parameters) + scalar_dict_bytes(ins.config) for _, ins in instructions
            )
        return instructions

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[tuple[ClientProxy, EvaluateRes] | BaseException],
    ) -> tuple[float | None, dict[str, Scalar]]:
        rec = self._record(server_round)
        rec["bytes_up"] += sum(scalar_dict_bytes(res.metrics) for _, res in results)
        if failures:
            rec["failures"] += len(failures)
            self._log_failures(server_round, failures, "evaluate")
        loss, metrics = self.inner.aggregate_evaluate(server_round, sorted(results, key=_sort_key), failures)
        if loss is not None:
            rec["federated_loss"] = loss
        for key, value in (metrics or {}).items():
            rec[f"federated_{key}"] = value
        return loss, metrics

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        rec = self._record(server_round)
        self.latest_parameters = parameters
        res = self.inner.evaluate(server_round, parameters)
        if res is not None:
            loss, metrics = res
            rec["loss"] = float(loss)
            for key, value in (metrics or {}).items():
                rec[key] = value
        return res
