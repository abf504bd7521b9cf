"""The round record for any legacy Flower strategy: :class:`MeteredStrategy` wraps one.

The project's strategies keep their round record themselves (``strategy.history``, a
:class:`~flwr_strategies.adapters.recorder.RoundRecorder`); the runner wraps a method registered
with only a legacy ``build_strategy`` (no core) in this class, which keeps the same record for it.
It does not change the algorithm, except that results are handed over in partition order (Flower
returns them in completion order) and a result holding NaN or infinity is moved to the failures.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import WARNING
from typing import Any

import numpy as np
from flwr.common import Parameters, log, parameters_to_ndarrays
from flwr.server.strategy import Strategy

from .adapters.recorder import RoundRecorder
from .common import PARTITION_KEY, payload_bytes, scalar_dict_bytes

__all__ = ["MeteredStrategy"]


def _partition(item: tuple[Any, Any]) -> tuple[int, int | str]:
    proxy, res = item
    metrics = getattr(res, "metrics", None) or {}
    return (0, int(metrics[PARTITION_KEY])) if PARTITION_KEY in metrics else (1, str(proxy.cid))


def _finite(parameters: Parameters) -> bool:
    return all(np.isfinite(a).all() for a in parameters_to_ndarrays(parameters) if a.dtype.kind in "fc")


class MeteredStrategy(Strategy):
    """Wrap the legacy strategy ``inner`` and keep its round record in ``self.history``.

    Parameters
    ----------
    inner : Strategy
        The strategy that does the work; every call is delegated to it.
    on_round_end : callable | None (default: None)
        Called with each finished round's record.
    """

    def __init__(self, inner: Strategy, *, on_round_end: Callable[[dict[str, Any]], None] | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.history = RoundRecorder(on_round_end)
        self.latest_parameters: Parameters | None = None  # the global model evaluate() saw last

    def __repr__(self) -> str:
        return f"MeteredStrategy({self.inner!r})"

    @property
    def rounds(self) -> list[dict[str, Any]]:
        return self.history.rounds

    @property
    def failure_log(self) -> list[dict[str, Any]]:
        return self.history.failure_log

    def finalize(self) -> list[dict[str, Any]]:
        """Close the last round and return every record."""
        return self.history.finalize()

    def _failures(self, server_round: int, failures: list, phase: str) -> None:
        rec = self.history.record(server_round)
        rec["failures"] += len(failures)
        for f in failures:
            if isinstance(f, BaseException):
                msg = f"{type(f).__name__}: {f}"
            else:
                proxy, res = f
                pid = (res.metrics or {}).get(PARTITION_KEY, "?")
                msg = (f"client {proxy.cid} (partition {pid}) sent NaN/inf values; treated as failed"
                       if res.status.code.name == "OK" else
                       f"client {proxy.cid} (partition {pid}): {res.status.code.name} {res.status.message}")
            log(WARNING, "Round %s %s failure: %s", server_round, phase, msg)
            self.history.log_failure(server_round, phase, msg)

    def initialize_parameters(self, client_manager):
        return self.inner.initialize_parameters(client_manager)

    def configure_fit(self, server_round, parameters, client_manager):
        rec = self.history.record(server_round)
        instructions = self.inner.configure_fit(server_round, parameters, client_manager)
        ready = getattr(client_manager, "ready_at", None)
        if ready is not None and ready > rec["_start"]:  # time spent waiting for clients to connect
            self.history.restart_clock(server_round)
        rec["clients"] = len(instructions)
        rec["bytes_down"] += sum(payload_bytes(i.parameters) + scalar_dict_bytes(i.config) for _, i in instructions)
        return instructions

    def aggregate_fit(self, server_round, results, failures):
        rec = self.history.record(server_round)
        rec["bytes_up"] += sum(payload_bytes(r.parameters) + scalar_dict_bytes(r.metrics) for _, r in results)
        kept = [item for item in sorted(results, key=_partition) if _finite(item[1].parameters)]
        bad = [item for item in results if item not in kept]
        rec["rejected"] = rec["nonfinite"] = len(bad)
        failures = list(failures) + bad
        if failures:
            self._failures(server_round, failures, "fit")
        params, metrics = self.inner.aggregate_fit(server_round, kept, failures)
        for key, value in (metrics or {}).items():
            rec[f"fit_{key}"] = value
        return params, metrics

    def configure_evaluate(self, server_round, parameters, client_manager):
        instructions = self.inner.configure_evaluate(server_round, parameters, client_manager)
        if instructions:
            self.history.record(server_round)["bytes_down"] += sum(
                payload_bytes(i.parameters) + scalar_dict_bytes(i.config) for _, i in instructions)
        return instructions

    def aggregate_evaluate(self, server_round, results, failures):
        rec = self.history.record(server_round)
        rec["bytes_up"] += sum(scalar_dict_bytes(r.metrics) for _, r in results)
        if failures:
            self._failures(server_round, list(failures), "evaluate")
        loss, metrics = self.inner.aggregate_evaluate(server_round, sorted(results, key=_partition), failures)
        if loss is not None:
            rec["federated_loss"] = loss
        for key, value in (metrics or {}).items():
            rec[f"federated_{key}"] = value
        return loss, metrics

    def evaluate(self, server_round, parameters):
        rec = self.history.record(server_round)
        self.latest_parameters = parameters
        res = self.inner.evaluate(server_round, parameters)
        if res is not None:
            rec["loss"] = float(res[0])
            for key, value in (res[1] or {}).items():
                rec[key] = value
        return res
