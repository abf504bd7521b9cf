"""Legacy Flower API adapter: a ``flwr.server.strategy.Strategy`` that drives a :class:`ServerCore`.

Every method's legacy strategy is a thin subclass of :class:`LegacyStrategy` that builds its core.
The adapter does the Flower side once for all of them:

- client identity: each connected client's ``partition-id`` (asked once with ``get_properties``,
  cached), so the core samples and addresses clients by partition, never by Flower's random ids;
- instructions to ``FitIns`` (one per client, with ``partition-id`` in the config), replies from
  ``FitRes``: a non-OK status or an exception is a failure; a reply whose arrays, partition or
  metrics are wrong is rejected before the core's state changes (``on_bad_reply``, see
  :mod:`flwr_strategies.core.validation`);
- central evaluation through ``evaluate_fn`` on the core's global model, and optional federated
  evaluation (``fraction_evaluate``);
- per-round records (bytes, failures, rejections, wall time) in ``self.history``;
- ``state_dict()`` / ``load_state_dict()`` to checkpoint and resume a run.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import WARNING
from typing import Any

import numpy as np
from flwr.common import (
    Code,
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    Parameters,
    Scalar,
    log,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from ..common import PARTITION_KEY, PartitionIdMissing, resolve_partitions
from ..core.messages import Reply, numeric_metrics
from ..core.server import ServerCore
from ..core.validation import Rejection, check_policy
from .recorder import RoundRecorder, arrays_nbytes, bytes_entries

__all__ = ["LegacyStrategy", "LegacyEvalFn"]

#: Flower's legacy ``evaluate_fn(server_round, ndarrays, config) -> (loss, metrics) | None``.
LegacyEvalFn = Callable[[int, list[np.ndarray], dict[str, Scalar]], "tuple[float, dict[str, Scalar]] | None"]


def _reply_from_fitres(pid: int, res: FitRes) -> Reply | Rejection:
    try:
        arrays = parameters_to_ndarrays(res.parameters)
    except Exception as err:  # corrupt payload bytes
        return Rejection(pid, f"arrays could not be decoded ({type(err).__name__}: {err})")
    metrics = dict(res.metrics or {})
    claimed = metrics.get(PARTITION_KEY)
    if claimed is not None and (not isinstance(claimed, (int, np.integer)) or int(claimed) != pid):
        return Rejection(pid, f"reply claims partition {claimed!r}")
    return Reply(pid, arrays, res.num_examples, metrics)


class LegacyStrategy(Strategy):
    """A legacy Flower strategy over a framework-neutral :class:`ServerCore`.

    Parameters
    ----------
    core : ServerCore
        The method's server core (state, sampling, aggregation).
    evaluate_fn : callable | None (default: None)
        Flower's ``evaluate_fn(server_round, ndarrays, config) -> (loss, metrics)``, run on the
        core's global model after every round the core evaluates (and at round 0).
    on_bad_reply : str (default: "drop")
        ``"drop"``: a reply that fails validation counts as a failed client; ``"raise"``: it
        raises :class:`~flwr_strategies.core.validation.ReplyError` with the state unchanged.
    accept_failures : bool (default: True)
        Aggregate a round in which some clients failed (False: skip such rounds, as Flower's FedAvg).
    fraction_evaluate : float (default: 0.0)
        Fraction of clients asked for federated evaluation of the global model, in [0, 1].
    min_evaluate_clients : int (default: 0)
        Minimum number of clients in federated evaluation (when ``fraction_evaluate > 0``), >= 0.
    min_available_clients : int (default: 1)
        Clients that must be connected before a round is configured, >= 1.
    wait_timeout : float (default: 600.0)
        Seconds to wait for ``min_available_clients``, > 0.
    partition_resolver : callable | None (default: None)
        ``client_manager -> {partition_id: ClientProxy}``. Default: ask each client's
        ``get_properties()["partition-id"]`` once (:func:`flwr_strategies.common.resolve_partitions`).
    on_round_end : callable | None (default: None)
        Called with every finished round record.
    """

    def __init__(
        self,
        core: ServerCore,
        *,
        evaluate_fn: LegacyEvalFn | None = None,
        on_bad_reply: str = "drop",
        accept_failures: bool = True,
        fraction_evaluate: float = 0.0,
        min_evaluate_clients: int = 0,
        min_available_clients: int = 1,
        wait_timeout: float = 600.0,
        partition_resolver: Callable[[ClientManager], dict[int, ClientProxy]] | None = None,
        on_round_end: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(core, ServerCore):
            raise TypeError(f"core must be a ServerCore, got {type(core).__name__}")
        if not 0.0 <= float(fraction_evaluate) <= 1.0:
            raise ValueError(f"fraction_evaluate must be in [0, 1], got {fraction_evaluate!r}")
        if int(min_evaluate_clients) < 0:
            raise ValueError(f"min_evaluate_clients must be >= 0, got {min_evaluate_clients!r}")
        if int(min_available_clients) < 1:
            raise ValueError(f"min_available_clients must be >= 1, got {min_available_clients!r}")
        if not float(wait_timeout) > 0:
            raise ValueError(f"wait_timeout must be > 0, got {wait_timeout!r}")
        self.core = core
        self.min_available_clients = int(min_available_clients)
        self.wait_timeout = float(wait_timeout)
        self.evaluate_fn = evaluate_fn
        self.on_bad_reply = check_policy(on_bad_reply)
        self.accept_failures = bool(accept_failures)
        self.fraction_evaluate = float(fraction_evaluate)
        self.min_evaluate_clients = int(min_evaluate_clients)
        self._resolver = partition_resolver or resolve_partitions
        self.history = RoundRecorder(on_round_end)
        self._pid_of_cid: dict[str, int] = {}
        self._sampled: dict[int, list[int]] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.core!r})"

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The core's :meth:`~flwr_strategies.core.server.ServerCore.state_dict`."""
        return self.core.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a :meth:`state_dict`; run the remaining rounds as Flower rounds
        ``state["server_round"] + 1 ...`` (for example ``ServerConfig(num_rounds=T - k)`` together
        with :attr:`round_offset`)."""
        self.core.load_state_dict(state)

    @property
    def round_offset(self) -> int:
        """Rounds completed before this strategy was started (0 unless resumed)."""
        return int(self._round_offset) if hasattr(self, "_round_offset") else 0

    def _algorithm_round(self, server_round: int) -> int:
        if not hasattr(self, "_round_offset"):
            self._round_offset = self.core.server_round
        return server_round + self._round_offset

    # ------------------------------------------------------------------ Flower API
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return ndarrays_to_parameters(self.core.global_arrays())

    def _proxies(self, client_manager: ClientManager) -> dict[int, ClientProxy]:
        if not client_manager.wait_for(self.min_available_clients, timeout=int(self.wait_timeout)):
            raise TimeoutError(
                f"only {client_manager.num_available()} of {self.min_available_clients} clients connected "
                f"after {self.wait_timeout:.0f}s"
            )
        try:
            proxies = self._resolver(client_manager)
        except PartitionIdMissing:
            if not getattr(self, "_warned_order", False):
                log(WARNING, "Clients do not report a 'partition-id' property (NumPyClient.get_properties): they "
                             "are ordered by client id, so sampling and per-client roles are not reproducible "
                             "across runs. Return {'partition-id': ...} from get_properties to fix this.")
                self._warned_order = True
            proxies = {i: proxy for i, (_, proxy) in enumerate(sorted(client_manager.all().items()))}
        self._pid_of_cid = {proxy.cid: int(pid) for pid, proxy in proxies.items()}
        return proxies

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        rnd = self._algorithm_round(server_round)
        rec = self.history.record(rnd)
        proxies = self._proxies(client_manager)
        rec_start = rec["_start"]
        ready = getattr(client_manager, "ready_at", None)
        if ready is not None and ready > rec_start:  # do not charge the wait for clients to the round
            rec["wait_s"] = round(ready - rec_start, 6)
            self.history.restart_clock(rnd)
        sampled = self.core.select(rnd, proxies)
        instructions = self.core.configure_train(rnd, sampled)
        self._sampled[rnd] = [ins.partition_id for ins in instructions]
        out = []
        for ins in instructions:
            config = {**ins.config, PARTITION_KEY: int(ins.partition_id)}
            rec["bytes_down"] += arrays_nbytes(ins.arrays) + bytes_entries(config)
            out.append((proxies[ins.partition_id], FitIns(ndarrays_to_parameters(ins.arrays), config)))
        rec["clients"] = len(out)
        return out

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        rnd = self._algorithm_round(server_round)
        rec = self.history.record(rnd)
        replies: list[Reply] = []
        rejected: list[Rejection] = []
        failed: list[int] = []
        for proxy, res in results:
            pid = self._pid_of_cid.get(proxy.cid)
            if pid is None:
                rejected.append(Rejection(None, f"reply from unknown client {proxy.cid}"))
                continue
            if res.status.code != Code.OK:
                failed.append(pid)
                self.history.log_failure(rnd, "fit", f"partition {pid}: {res.status.code.name} {res.status.message}")
                continue
            item = _reply_from_fitres(pid, res)
            if isinstance(item, Rejection):
                rejected.append(item)
                continue
            rec["bytes_up"] += arrays_nbytes(item.arrays) + bytes_entries(item.metrics)
            replies.append(item)
        for f in failures:
            if isinstance(f, BaseException):
                self.history.log_failure(rnd, "fit", f"{type(f).__name__}: {f}")
            else:
                pid = self._pid_of_cid.get(f[0].cid)
                if pid is not None:
                    failed.append(pid)
                self.history.log_failure(rnd, "fit", f"partition {pid}: {f[1].status.code.name} {f[1].status.message}")
        if rejected and self.on_bad_reply == "raise":
            from ..core.validation import ReplyError

            raise ReplyError(f"{type(self.core).__name__} round {rnd}: {rejected[0]}")
        if failures and not self.accept_failures:
            rec["failures"] += len(failures) + len(failed)
            return None, {}
        result = self.core.train_round(
            rnd, replies, sampled=self._sampled.pop(rnd, []), failed=failed, on_bad_reply=self.on_bad_reply
        )
        rejections = rejected + list(result.rejections)
        for r in rejections:
            log(WARNING, "Round %s: rejected reply from %s", rnd, r)
            self.history.log_failure(rnd, "rejected", str(r))
        metrics = dict(result)
        metrics["rejected"] = len(rejections)
        metrics["failures"] = int(metrics.get("failures", 0)) + sum(1 for r in rejected if r.partition_id is None)
        rec["failures"] = int(metrics["failures"])
        rec["rejected"] = len(rejections)
        for key, value in metrics.items():
            rec[f"fit_{key}"] = value
        return ndarrays_to_parameters(self.core.global_arrays()), numeric_metrics(metrics)

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, EvaluateIns]]:
        if self.fraction_evaluate == 0.0:
            return []
        rnd = self._algorithm_round(server_round)
        proxies = self._proxies(client_manager)
        ids = sorted(proxies)
        k = min(len(ids), max(int(len(ids) * self.fraction_evaluate), self.min_evaluate_clients))
        rng = np.random.default_rng([self.core.seed, rnd, 0xE7A1])
        chosen = [ids[int(i)] for i in np.sort(rng.choice(len(ids), size=k, replace=False))]
        arrays = self.core.global_arrays()
        params = ndarrays_to_parameters(arrays)
        config = {"server_round": rnd}
        rec = self.history.record(rnd)
        rec["bytes_down"] += arrays_nbytes(arrays) * len(chosen)
        return [(proxies[pid], EvaluateIns(params, {**config, PARTITION_KEY: pid})) for pid in chosen]

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[tuple[ClientProxy, EvaluateRes] | BaseException],
    ) -> tuple[float | None, dict[str, Scalar]]:
        rnd = self._algorithm_round(server_round)
        rec = self.history.record(rnd)
        ok = [(p, r) for p, r in results if r.status.code == Code.OK and np.isfinite(r.loss) and r.num_examples > 0]
        if len(ok) < len(results) or failures:
            rec["failures"] += len(results) - len(ok) + len(failures)
        if not ok:
            return None, {}
        ok.sort(key=lambda item: self._pid_of_cid.get(item[0].cid, -1))
        n = np.array([r.num_examples for _, r in ok], dtype=np.float64)
        loss = float(np.dot(n, [r.loss for _, r in ok]) / n.sum())
        metrics: dict[str, Scalar] = {}
        keys = set.intersection(*(set(numeric_metrics(r.metrics)) for _, r in ok))
        for key in sorted(keys - {PARTITION_KEY}):
            metrics[key] = float(np.dot(n, [float(r.metrics[key]) for _, r in ok]) / n.sum())
        rec["federated_loss"] = loss
        for key, value in metrics.items():
            rec[f"federated_{key}"] = value
        return loss, metrics

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        rnd = self._algorithm_round(server_round) if server_round > 0 else self.core.server_round
        if self.evaluate_fn is None or not self.core.should_evaluate(rnd):
            return None
        rec = self.history.record(rnd)
        res = self.core.evaluate(rnd, lambda r, arrays: self.evaluate_fn(r, arrays, {}))
        if res is None:
            return None
        loss, metrics = res
        rec["loss"] = float(loss)
        for key, value in (metrics or {}).items():
            rec[key] = value
        return float(loss), dict(metrics)
