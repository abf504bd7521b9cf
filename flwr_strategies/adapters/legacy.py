"""Legacy Flower API adapter: a ``flwr.server.strategy.Strategy`` that drives a method's core.

Every method's legacy strategy is a declaration: a subclass of :class:`LegacyStrategy` that names
its core and its config dataclasses (see :mod:`flwr_strategies.adapters.method`). The adapter does
the Flower side once for all of them: Flower's legacy ``FedAvg`` arguments; each client's
``partition-id``, asked once and cached, so the core samples and addresses clients by partition,
never by Flower's random ids (:meth:`LegacyStrategy._proxies`); sampling through the
``ClientManager`` Flower hands it, with the user's ``criterion`` (:meth:`LegacyStrategy.candidates`);
the model Flower passes to ``configure_fit`` as the global model (:meth:`LegacyStrategy._global`);
``FitRes`` replies decoded in one place as read-only views of their bytes (:func:`_decode`);
central and federated evaluation; the round itself run by the shared
:class:`~flwr_strategies.adapters.recorder.RoundSession`, recorded in ``self.history``.

The legacy API's ``Parameters`` carry no names, so the order of a reply's arrays is its layout
(as in Flower's legacy FedAvg): arrays returned in another order are rejected where their shapes
or dtypes tell, and cannot be told apart where they are equal. The Message API
(:class:`~flwr_strategies.adapters.message.MessageStrategy`) reads replies by name.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from logging import INFO, WARNING
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
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.criterion import Criterion
from flwr.server.strategy import Strategy

from ..common import PARTITION_KEY
from ..core.aggregation import weighted_mean_metrics
from ..core.messages import Reply, numeric_metrics
from ..core.validation import Rejection, check_integer, check_number
from ..sampling import PartitionIdMissing, resolve_partitions
from .method import CoreFactory, MethodAdapter
from .recorder import evaluation_sample
from .wire import NUMPY_STYPE, npy_bytes, npy_view, payload_bytes

__all__ = ["LegacyStrategy"]

#: Flower's legacy ``evaluate_fn(server_round, ndarrays, config) -> (loss, metrics) | None``.
LegacyEvalFn = Callable[[int, list[np.ndarray], dict[str, Scalar]], "tuple[float, dict[str, Scalar]] | None"]
#: Flower's legacy ``[(num_examples, metrics), ...] -> metrics``.
MetricsAggregationFn = Callable[[list[tuple[int, dict[str, Scalar]]]], dict[str, Scalar]]


def _as_arrays(initial: Any) -> tuple[list[np.ndarray], list[str] | None]:
    """``initial_parameters`` (Parameters, a list of arrays or a name -> array mapping) as arrays."""
    if isinstance(initial, Parameters):
        return parameters_to_ndarrays(initial), None
    if isinstance(initial, Mapping):
        values = [v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v) for v in initial.values()]
        return values, [str(k) for k in initial]
    return [np.asarray(a) for a in initial], None


def _parameters(arrays: list[np.ndarray]) -> Parameters:
    """``ndarrays_to_parameters(arrays)``, the same bytes, with one copy of the data
    (:func:`~flwr_strategies.adapters.wire.npy_bytes`)."""
    return Parameters(tensors=[npy_bytes(a) for a in arrays], tensor_type=NUMPY_STYPE)


def _decode(pid: int, res: FitRes) -> Reply | Rejection:
    """One ``FitRes`` as a :class:`Reply` (or why it cannot be one): the only place replies are
    decoded. The arrays are read-only views of the reply's bytes
    (:func:`~flwr_strategies.adapters.wire.npy_view`): no copy, no memory of model size."""
    try:
        arrays = [npy_view(t) for t in res.parameters.tensors]
    except Exception as err:  # corrupt payload bytes
        return Rejection(pid, f"arrays could not be decoded ({type(err).__name__}: {err})")
    metrics = dict(res.metrics or {})
    claimed = metrics.get(PARTITION_KEY)
    if claimed is not None and (not isinstance(claimed, (int, np.integer)) or int(claimed) != pid):
        return Rejection(pid, f"reply claims partition {claimed!r}")
    return Reply(pid, arrays, res.num_examples, metrics)


class LegacyStrategy(MethodAdapter, Strategy):
    """A legacy Flower strategy over a method's framework-neutral server core.

    Takes the arguments of Flower's legacy ``FedAvg`` with Flower's names, meanings and defaults,
    plus the method's hyperparameters as keyword arguments (the fields of the method's config
    dataclass, listed in its docstring).

    Parameters
    ----------
    fraction_fit : float (default: 1.0)
        Fraction of clients used during training, in (0, 1]. If ``min_fit_clients`` is larger than
        ``fraction_fit * available_clients``, ``min_fit_clients`` are still sampled. Decentralized
        methods train every peer every round: 1.0 only.
    fraction_evaluate : float (default: 1.0)
        Fraction of clients used during federated evaluation of the global model, in [0, 1]
        (0 turns it off).
    min_fit_clients : int (default: 2)
        Minimum number of clients used during training, >= 1.
    min_evaluate_clients : int (default: 2)
        Minimum number of clients used during federated evaluation, >= 0.
    min_available_clients : int (default: 2)
        Minimum number of total clients in the system, >= 1. The strategy learns the number of
        clients from the ones connected when at least this many are (and their partition ids are
        ``0..N-1``); set it to the federation's size where clients connect over time.
    evaluate_fn : callable | None (default: None)
        ``evaluate_fn(server_round, ndarrays, config) -> (loss, metrics) | None``: central
        evaluation of the global model before round 1 and after every round the method evaluates.
    on_fit_config_fn : callable | None (default: None)
        ``server_round -> dict`` of the training config sent to every client (lr, epochs...).
    on_evaluate_config_fn : callable | None (default: None)
        ``server_round -> dict`` of the evaluation config sent to the evaluating clients.
    accept_failures : bool (default: True)
        Aggregate rounds in which some clients failed; False skips such rounds.
    initial_parameters : Parameters | list[np.ndarray] | Mapping[str, array] | None (default: None)
        Initial global model; None asks one client for its parameters (Flower's behaviour).
    fit_metrics_aggregation_fn : callable | None (default: None)
        ``[(num_examples, metrics), ...] -> metrics`` over the accepted training replies; its
        output joins the method's own round metrics. None: the example-weighted mean of every
        numeric metric the clients share.
    evaluate_metrics_aggregation_fn : callable | None (default: None)
        The same for federated evaluation replies.
    inplace : bool (default: True)
        Aggregate in place, as Flower's ``aggregate_inplace``: the cores use its arithmetic.
        False (Flower's out-of-place ``aggregate``) is refused.
    seed : int (default: 0)
        Seed of the client sampling and of the method's server-side randomness, >= 0.
    on_bad_reply : str (default: "drop")
        ``"drop"``: a reply that fails validation counts as a failed client; ``"raise"``: it raises
        :class:`~flwr_strategies.core.validation.ReplyError` with the state unchanged.
    wait_timeout : float (default: 600.0)
        Seconds to wait for ``min_available_clients`` and for missing partitions, > 0.
    partition_resolver : callable | None (default: None)
        ``client_manager -> {partition_id: ClientProxy}``. Default: ask each client's
        ``get_properties()["partition-id"]`` once.
    criterion : flwr.server.criterion.Criterion | None (default: None)
        Passed to ``client_manager.sample`` every round: only the clients it admits (and the
        client manager returns) can be chosen for training and evaluation. None admits every
        client, as Flower's ``FedAvg``.
    on_round_end : callable | None (default: None)
        Called with every finished round record.
    core_factory : callable | None (default: None)
        ``(initial_arrays, num_partitions) -> ServerCore`` instead of a method's declaration.
    max_num_examples : int | Mapping[int, int] | None (default: None)
        The most a reply's ``FitRes.num_examples`` may weigh: an integer >= 1 for every client, or
        ``{partition_id: bound}`` (each partition's dataset size, as the project's runner sets it;
        a reply from a partition it does not name is rejected). A count is the client's own claim:
        without a bound one client reporting ``2**31`` owns the whole average, as in Flower's
        FedAvg. A count above its bound is weighted as the bound and counted in the round's
        ``num_examples_clipped`` metric. None (default): counts are trusted, as Flower does.
    """

    flower_names = ("fraction_fit", "fraction_evaluate", "min_fit_clients", "on_fit_config_fn")

    def __init__(
        self, *, fraction_fit: float = 1.0, fraction_evaluate: float = 1.0, min_fit_clients: int = 2,
        min_evaluate_clients: int = 2, min_available_clients: int = 2, evaluate_fn: LegacyEvalFn | None = None,
        on_fit_config_fn: Callable[[int], dict[str, Scalar]] | None = None,
        on_evaluate_config_fn: Callable[[int], dict[str, Scalar]] | None = None, accept_failures: bool = True,
        initial_parameters: Parameters | list[np.ndarray] | Mapping[str, Any] | None = None,
        fit_metrics_aggregation_fn: MetricsAggregationFn | None = None,
        evaluate_metrics_aggregation_fn: MetricsAggregationFn | None = None, inplace: bool = True, seed: int = 0,
        on_bad_reply: str = "drop", wait_timeout: float = 600.0,
        partition_resolver: Callable[[ClientManager], dict[int, ClientProxy]] | None = None,
        criterion: Criterion | None = None, on_round_end: Callable[[dict[str, Any]], None] | None = None,
        core_factory: CoreFactory | None = None, max_num_examples: int | Mapping[int, int] | None = None,
        **hyperparameters: Any,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        check_number(f"{name}: fraction_fit", fraction_fit, "in (0, 1]", lambda v: 0.0 < v <= 1.0)
        check_number(f"{name}: fraction_evaluate", fraction_evaluate, "in [0, 1]", lambda v: 0.0 <= v <= 1.0)
        for key, value, low in (("min_fit_clients", min_fit_clients, 1), ("min_evaluate_clients", min_evaluate_clients, 0),
                                ("min_available_clients", min_available_clients, 1)):
            check_integer(f"{name}: {key}", value, low)
        if inplace is not True:
            raise ValueError(f"{name}: inplace={inplace!r} is not available: the strategy aggregates with the "
                             "arithmetic of Flower's aggregate_inplace (inplace=True, Flower's default)")
        self.fraction_fit = float(fraction_fit)
        self.fraction_evaluate = float(fraction_evaluate)
        self.min_fit_clients = int(min_fit_clients)
        self.min_evaluate_clients = int(min_evaluate_clients)
        self.min_available_clients = int(min_available_clients)
        self.evaluate_fn = evaluate_fn
        self.on_fit_config_fn = on_fit_config_fn
        self.on_evaluate_config_fn = on_evaluate_config_fn
        self.accept_failures = bool(accept_failures)
        self.fit_metrics_aggregation_fn = fit_metrics_aggregation_fn
        self.evaluate_metrics_aggregation_fn = evaluate_metrics_aggregation_fn
        self.inplace = True
        self._init_method(hyperparameters=hyperparameters, seed=seed, on_bad_reply=on_bad_reply,
                          core_factory=core_factory, on_round_end=on_round_end, wait_timeout=wait_timeout,
                          max_num_examples=max_num_examples)
        self.initial_parameters: Parameters | None = None
        self._returned: Parameters | None = None  # the model Flower holds from this strategy
        if initial_parameters is not None:
            arrays, self._names = _as_arrays(initial_parameters)
            self.initial_parameters = _parameters(arrays)
            cls = self.core_cls
            if cls is not None and not (cls.full_participation or getattr(cls, "needs_num_partitions", False)):
                # the core needs nothing a run tells: build it now, so bad settings fail here
                self._install_core(self.build_core(arrays, 0))
                self._returned = self.initial_parameters
        self._resolver = partition_resolver or resolve_partitions
        if criterion is not None and not callable(getattr(criterion, "select", None)):
            raise ValueError(f"{name}: criterion must be a flwr.server.criterion.Criterion (with a select(client) "
                             f"method), got {type(criterion).__name__}")
        self.criterion = criterion
        self._pid_of_cid: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(core={getattr(self, 'core', None)!r})"

    # ------------------------------------------------------------------ clients
    def _proxies(self, client_manager: ClientManager) -> dict[int, ClientProxy]:
        """The connected clients by partition id (after waiting for ``min_available_clients``)."""
        deadline = time.monotonic() + self.wait_timeout
        # num_available() first: under Flower's Grid compatibility layer it registers the nodes that
        # connected (as sample() does), where wait_for alone waits for its 5-second refresh
        step = max(1, int(min(10.0, self.wait_timeout)))
        while (client_manager.num_available() < self.min_available_clients
               and not client_manager.wait_for(self.min_available_clients, timeout=step)):
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{type(self).__name__}: only {client_manager.num_available()} of min_available_clients="
                    f"{self.min_available_clients} clients connected after {self.wait_timeout:.0f}s"
                )
            log(INFO, "%s: waiting for min_available_clients=%d (%d connected)", type(self).__name__,
                self.min_available_clients, client_manager.num_available())
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

    def candidates(self, client_manager: ClientManager) -> dict[int, ClientProxy]:
        """The clients a round may choose from, by partition id: the connected clients (after
        waiting for ``min_available_clients``) that ``client_manager.sample`` returns when asked,
        with :attr:`criterion`, for every client the criterion admits.

        The rule: the client manager and the criterion decide which clients are candidates, the
        method decides which candidates train (its seeded choice of partitions, the same through
        both APIs and every backend). With Flower's ``SimpleClientManager`` (or
        :class:`~flwr_strategies.sampling.PartitionClientManager`) and no criterion that is every
        connected client. ``fraction_fit`` and ``min_fit_clients`` apply to the candidates; a
        client the criterion excludes is treated like one that is not connected (a peer of a
        decentralized method then counts as gone, see its ``failure_policy``).
        """
        proxies = self._proxies(client_manager)
        for _ in range(2):  # asked again once when a client left between the count and the sample
            admitted = sum(1 for proxy in client_manager.all().values()
                           if self.criterion is None or self.criterion.select(proxy))
            sample = client_manager.sample(num_clients=admitted, min_num_clients=self.min_available_clients,
                                           criterion=self.criterion)
            if sample or not admitted:
                break
        chosen = {proxy.cid for proxy in sample}
        return {pid: proxy for pid, proxy in proxies.items() if proxy.cid in chosen}

    # ------------------------------------------------------------------ Flower API
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return self.initial_parameters

    def _global(self, server_round: int, parameters: Parameters, client_manager: ClientManager) -> None:
        """Build the core in the first round (from ``parameters``) or follow ``parameters``. The
        number of clients is those connected once ``min_available_clients`` are, when their
        partition ids are ``0..N-1`` (missing ids are waited for up to ``wait_timeout``)."""
        if self.core is not None:
            self._follow(parameters, self.method_round(server_round))
            return
        deadline = time.monotonic() + self.wait_timeout
        said = 0.0
        while True:
            ids = sorted(self._proxies(client_manager))
            missing = sorted(set(range(max(ids) + 1)) - set(ids)) if ids else []
            if ids and not missing:
                break
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(
                    f"{type(self).__name__}: {len(ids)} clients connected (partitions {ids[:10]}), but partitions "
                    f"{missing[:10]} did not connect within {self.wait_timeout:.0f}s"
                )
            if now - said > 10.0:
                log(INFO, "%s: waiting for partitions %s (%d clients connected)", type(self).__name__, missing[:10], len(ids))
                said = now
            time.sleep(0.2)
        n = len(ids)
        core = self.build_core(parameters_to_ndarrays(parameters), n)
        if core.full_participation and self.min_fit_clients > n:
            raise ValueError(f"{type(self).__name__}: min_fit_clients={self.min_fit_clients} but only {n} peers "
                             "connected (every peer trains every round)")
        self._install_core(core)
        self._returned = parameters

    def _follow(self, parameters: Parameters, rnd: int) -> None:
        """Continue from ``parameters`` when they are not the model this strategy gave Flower."""
        own = self._returned
        if parameters is own or (own is not None and list(parameters.tensors) == list(own.tensors)):
            return
        self.sync_global(parameters_to_ndarrays(parameters), rnd)

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        self._global(server_round, parameters, client_manager)
        proxies = self.candidates(client_manager)  # the round's record opens after the wait for the clients
        return self.session.configure(self.core, self.method_round(server_round), proxies,
                                      lambda ins, config: (proxies[ins.partition_id], FitIns(_parameters(ins.arrays), config)),
                                      per_partition=self.client_state_config)

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list[tuple[ClientProxy, FitRes] | BaseException]) -> tuple[Parameters | None, dict[str, Scalar]]:
        rnd = self.method_round(server_round)
        items: list[Reply | Rejection | int] = []
        for proxy, res in results:
            pid = self._pid_of_cid.get(proxy.cid)
            if pid is None:
                items.append(Rejection(None, f"reply from unknown client {proxy.cid}"))
            elif res.status.code != Code.OK:
                items.append(pid)
                self.history.log_failure(rnd, "fit", f"partition {pid}: {res.status.code.name} {res.status.message}")
            else:
                items.append(_decode(pid, res))
        for f in failures:
            if isinstance(f, BaseException):
                self.history.log_failure(rnd, "fit", f"{type(f).__name__}: {f}")
                continue
            pid = self._pid_of_cid.get(f[0].cid)
            items.extend([] if pid is None else [pid])
            self.history.log_failure(rnd, "fit", f"partition {pid}: {f[1].status.code.name} {f[1].status.message}")
        replies, rejected, failed = self.session.sort(rnd, items)
        if failures and not self.accept_failures:  # Flower's FedAvg: a round with a failure is not aggregated
            self.history.record(rnd)["failures"] += len(failures) + len(failed)
            self.session.sampled.pop(rnd, None)
            self.core.round_not_aggregated(rnd)  # the state stays; a private method accounts what went out
            self.history.not_aggregated(rnd, rejected, why="a client failed and accept_failures=False drops the round")
            return None, {}
        result, metrics = self.session.train(self.core, rnd, replies, rejected, failed,
                                             anonymous=sum(isinstance(f, BaseException) for f in failures))
        if self.fit_metrics_aggregation_fn is not None:
            bad = {r.partition_id for r in result.rejections}
            user = self.fit_metrics_aggregation_fn([(r.num_examples, r.metrics) for r in replies
                                                    if r.partition_id not in bad]) or {}
            metrics.update(user)
            self.session.record(rnd, user, "fit_")
        self._returned = _parameters(self.core.model_arrays())
        return self._returned, numeric_metrics(metrics)

    def configure_evaluate(self, server_round: int, parameters: Parameters,
                           client_manager: ClientManager) -> list[tuple[ClientProxy, EvaluateIns]]:
        if self.fraction_evaluate == 0.0 or self.core is None:
            return []
        rnd = self.method_round(server_round)
        self._follow(parameters, rnd)
        if not self.core.should_evaluate(rnd):
            return []
        proxies = self.candidates(client_manager)
        chosen = evaluation_sample(sorted(proxies), rnd, self.fraction_evaluate, self.min_evaluate_clients, self.seed)
        config = dict(self.on_evaluate_config_fn(rnd)) if self.on_evaluate_config_fn is not None else {}
        config["server-round"] = rnd
        self.history.record(rnd)["bytes_down"] += payload_bytes(parameters) * len(chosen)
        return [(proxies[pid], EvaluateIns(parameters, {**config, PARTITION_KEY: pid})) for pid in chosen]

    def aggregate_evaluate(self, server_round: int, results: list[tuple[ClientProxy, EvaluateRes]],
                           failures: list[tuple[ClientProxy, EvaluateRes] | BaseException]) -> tuple[float | None, dict[str, Scalar]]:
        rnd = self.method_round(server_round)
        rec = self.history.record(rnd)
        ok = [(p, r) for p, r in results if r.status.code == Code.OK and np.isfinite(r.loss) and r.num_examples > 0]
        rec["failures"] += len(results) - len(ok) + len(failures)
        if not ok:
            return None, {}
        ok.sort(key=lambda item: self._pid_of_cid.get(item[0].cid, -1))
        n = np.array([r.num_examples for _, r in ok], dtype=np.float64)
        loss = float(np.dot(n, [r.loss for _, r in ok]) / n.sum())
        rows = [(r.num_examples, dict(r.metrics or {})) for _, r in ok]
        metrics = (weighted_mean_metrics(rows) if self.evaluate_metrics_aggregation_fn is None
                   else dict(self.evaluate_metrics_aggregation_fn(rows) or {}))
        self.session.record(rnd, {"loss": loss, **metrics}, "federated_")
        return loss, metrics

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        if self.evaluate_fn is None:
            return None
        rnd, res = self._evaluate_central(server_round, parameters,
                                          lambda r: self.evaluate_fn(r, parameters_to_ndarrays(parameters), {}),
                                          lambda r, arrays: self.evaluate_fn(r, arrays, {}))
        return self.session.evaluated(rnd, res)
