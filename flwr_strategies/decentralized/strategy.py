"""Legacy Flower adapters of the decentralized cores, and the pre-core peer-emulation strategy.

- :class:`DecentralizedLegacyStrategy`: a :class:`~flwr_strategies.adapters.legacy.LegacyStrategy`
  over a :class:`~flwr_strategies.decentralized.server.DecentralizedCore`, with the graph settings
  as keyword arguments. DFedCata, DFedAvg and D-PSGD's legacy classes are thin subclasses.
- :class:`DecentralizedStrategy` (below): the earlier self-contained legacy strategy, kept
  unchanged for DO-ADP's strategy until it moves onto a core. New code should use the cores.

:class:`DecentralizedStrategy` emulates m peers that train locally and gossip with their
graph neighbours. The server plays the network: it holds one model per client (partition
id) in one contiguous ``(m, d)`` table, sends every client *its own* model
(``configure_fit`` returns a different ``FitIns`` per client) and applies the mixing step
``X <- W^t @ Y`` sparsely (cost ~ edges x model size). No real peer links exist; the bytes a
real deployment would send peer-to-peer are reported as ``p2p_bytes``.

Subclass hooks (defaults give DFedAvg: start from the mixed model, mix what comes back):

- ``start_points(server_round) -> np.ndarray``: ``(m, d)`` models sent to the clients.
- ``fit_config(server_round, pid) -> dict``: per-client config (``on_fit_config_fn`` output +
  ``"partition-id"``).
- ``combine(W, returned, alive) -> np.ndarray``: the gossip step (default ``W @ returned``).
- ``update_state(server_round, returned, mixed, alive)``: called after mixing with the table
  of returned models (failed rows hold the client's previous mixed model), the new mixed
  table and the boolean mask of clients that replied. Must set ``self.models.data``.

Client identity: ``resolve_partitions(client_manager)`` (foundation) maps partition ids to
proxies; row ``i`` of the table is partition ``i``, stable across rounds.

Failures: a client that fails or does not reply keeps its previous mixed model; its
neighbours mix over the clients that replied (``failure_policy="renormalize"``: their rows
are renormalised; ``"self"``: the lost weight goes to the self weight, which keeps a doubly
stochastic W doubly stochastic). The round reports ``failures``.

Metrics (``aggregate_fit``): ``consensus_distance``, ``failures``, ``links``, ``p2p_bytes``, ``connected``,
``spectral_gap`` (for m <= 256), ``train_loss`` (mean of the clients' ``train_loss``).
Metrics (``evaluate``): ``accuracy``/loss of the network-average model x_bar (what the
DFedCata paper evaluates), ``client_accuracy_mean``/``client_accuracy_min`` over the
clients' own models (every ``client_eval_every`` rounds; up to ``client_eval_max`` clients,
lowest ids first), ``consensus_distance``.
"""

from __future__ import annotations

from logging import WARNING
from typing import Any, Callable, Optional

import numpy as np
import scipy.sparse as sp
from flwr.common import (
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

from .consensus import consensus_distance, network_average
from .mixing import is_connected, mix, mixing_matrix, restrict_to_alive, second_eigenvalue_modulus
from .table import ModelTable
from .topology import Topology

__all__ = ["DecentralizedStrategy", "DecentralizedLegacyStrategy", "graph_config"]

EvalFn = Callable[[int, list[np.ndarray], dict[str, Scalar]], Optional[tuple[float, dict[str, Scalar]]]]


def _default_resolver(client_manager: ClientManager) -> dict[int, ClientProxy]:
    from flwr_strategies.common import resolve_partitions  # foundation

    return resolve_partitions(client_manager)


class DecentralizedStrategy(Strategy):
    """Decentralized FL (gossip over a peer graph) emulated by the server.

    Parameters
    ----------
    num_clients : int
        Number of peers m (>= 1); partition ids must be ``0..m-1``.
    initial_parameters : list[np.ndarray] | Parameters
        Common initial model x^0 of every peer.
    topology : Topology
        Peer graph (possibly redrawn every round). Round t = server_round - 1.
    weights : str (default: "auto")
        Mixing weights: "auto" (uniform on regular graphs, Metropolis-Hastings otherwise),
        "uniform" or "metropolis_hastings".
    allow_row_stochastic : bool (default: False)
        Accept mixing matrices that are only row-stochastic (e.g. uniform on irregular graphs).
    allow_disconnected : bool | None (default: None)
        Accept a disconnected graph in some round. None: accept for time-varying topologies
        (only the union over rounds must be connected; rounds report ``connected``), reject
        for static ones.
    failure_policy : str (default: "renormalize")
        How live clients mix when a neighbour failed: "renormalize" or "self".
    evaluate_fn : callable | None (default: None)
        Flower-style ``evaluate_fn(server_round, ndarrays, config) -> (loss, metrics)`` on a
        central test set; used for the network-average model and the per-client models.
    on_fit_config_fn : callable | None (default: None)
        ``server_round -> dict`` of config sent to every client (lr, local epochs, seed...).
    client_eval_every : int (default: 1)
        Evaluate the clients' own models every this many rounds (0 disables).
    client_eval_max : int | None (default: None)
        Evaluate at most this many clients' own models (None: all).
    dtype : numpy dtype (default: float32)
        dtype of the model table.
    partition_resolver : callable | None (default: None)
        ``client_manager -> {partition_id: proxy}``; default is the foundation's
        ``flwr_strategies.common.resolve_partitions``.
    """

    def __init__(
        self,
        *,
        num_clients: int,
        initial_parameters: list[np.ndarray] | Parameters,
        topology: Topology,
        weights: str = "auto",
        allow_row_stochastic: bool = False,
        allow_disconnected: bool | None = None,
        failure_policy: str = "renormalize",
        evaluate_fn: EvalFn | None = None,
        on_fit_config_fn: Callable[[int], dict[str, Scalar]] | None = None,
        client_eval_every: int = 1,
        client_eval_max: int | None = None,
        dtype: Any = np.float32,
        partition_resolver: Callable[[ClientManager], dict[int, ClientProxy]] | None = None,
    ) -> None:
        super().__init__()
        if int(num_clients) != num_clients or num_clients < 1:
            raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
        if topology.num_nodes != num_clients:
            raise ValueError(f"topology has {topology.num_nodes} nodes but num_clients={num_clients}")
        if failure_policy not in ("renormalize", "self"):
            raise ValueError(f"failure_policy must be 'renormalize' or 'self', got {failure_policy!r}")
        if client_eval_every < 0:
            raise ValueError(f"client_eval_every must be >= 0, got {client_eval_every!r}")
        if isinstance(initial_parameters, Parameters):
            initial_parameters = parameters_to_ndarrays(initial_parameters)
        self.num_clients = int(num_clients)
        self.topology = topology
        self.weights = weights
        self.allow_row_stochastic = allow_row_stochastic
        self.allow_disconnected = topology.time_varying if allow_disconnected is None else bool(allow_disconnected)
        self.failure_policy = failure_policy
        self.evaluate_fn = evaluate_fn
        self.on_fit_config_fn = on_fit_config_fn
        self.client_eval_every = int(client_eval_every)
        self.client_eval_max = client_eval_max
        self.models = ModelTable.replicate(list(initial_parameters), self.num_clients, dtype=dtype)
        self.layout = self.models.layout
        self._resolver = partition_resolver or _default_resolver
        self._W_cache: tuple[int, sp.csr_matrix] | None = None
        self._sent: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_clients={self.num_clients}, topology={self.topology!r})"

    # ------------------------------------------------------------------ hooks
    def start_points(self, server_round: int) -> np.ndarray:
        """Models sent to the clients (default: their mixed models)."""
        return self.models.data

    def fit_config(self, server_round: int, pid: int) -> dict[str, Scalar]:
        cfg: dict[str, Scalar] = dict(self.on_fit_config_fn(server_round)) if self.on_fit_config_fn else {}
        cfg["partition-id"] = int(pid)
        return cfg

    def update_state(self, server_round: int, returned: np.ndarray, mixed: np.ndarray, alive: np.ndarray) -> None:
        """Store the new mixed models (subclasses also shift their extra state here)."""
        self.models.data = mixed

    def combine(self, W: sp.csr_matrix, returned: np.ndarray, alive: np.ndarray) -> np.ndarray:
        """New mixed table from the returned models (default: adapt-then-combine ``W @ Y``)."""
        return mix(W, returned)

    # ------------------------------------------------------------------ mixing
    def mixing_matrix(self, server_round: int) -> sp.csr_matrix:
        """W^t of round ``t = server_round - 1`` (validated; cached per round)."""
        t = server_round - 1
        if self._W_cache is not None and self._W_cache[0] == t:
            return self._W_cache[1]
        W = mixing_matrix(
            self.topology.graph(t),
            self.weights,
            allow_row_stochastic=self.allow_row_stochastic,
            allow_disconnected=self.allow_disconnected,
        )
        self._W_cache = (t, W)
        return W

    def network_average(self) -> list[np.ndarray]:
        return self.layout.unflatten(network_average(self.models.data))

    # ------------------------------------------------------------------ Flower API
    def initialize_parameters(self, client_manager: ClientManager) -> Optional[Parameters]:
        return ndarrays_to_parameters(self.network_average())

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        proxies = self._resolver(client_manager)
        bad = sorted(p for p in proxies if not 0 <= int(p) < self.num_clients)
        if bad:
            raise ValueError(f"partition ids {bad} are outside 0..{self.num_clients - 1}")
        self.mixing_matrix(server_round)  # draw/validate W^t before training
        start = self.start_points(server_round)
        self._sent = start
        return [
            (proxies[pid], FitIns(ndarrays_to_parameters(self.layout.unflatten(start[pid])), self.fit_config(server_round, pid)))
            for pid in sorted(proxies)
        ]

    def _pid(self, proxy: ClientProxy, res: FitRes | EvaluateRes) -> int:
        if res.metrics and "partition-id" in res.metrics:
            return int(res.metrics["partition-id"])
        raise ValueError(f"client {proxy.cid} did not report 'partition-id' in its fit metrics")

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Optional[Parameters], dict[str, Scalar]]:
        m = self.num_clients
        alive = np.zeros(m, dtype=bool)
        returned = self.models.data.copy()  # failed rows: previous mixed model
        losses = []
        for proxy, res in results:
            pid = self._pid(proxy, res)
            if alive[pid]:
                raise ValueError(f"two results for partition {pid} in round {server_round}")
            self.layout.flatten(parameters_to_ndarrays(res.parameters), out=returned[pid])
            alive[pid] = True
            if "train_loss" in res.metrics:
                losses.append(float(res.metrics["train_loss"]))
        n_failed = int(m - alive.sum())
        if not np.all(np.isfinite(returned[alive])):
            bad = np.flatnonzero(~np.isfinite(returned).all(axis=1) & alive)
            raise FloatingPointError(
                f"round {server_round}: clients {bad.tolist()} returned non-finite models (diverged); "
                "lower the learning rate or beta, or enable weight decay / gradient clipping"
            )
        W = self.mixing_matrix(server_round)
        if n_failed:
            log(WARNING, "round %s: %s of %s clients failed; they keep their previous model", server_round, n_failed, m)
            W = restrict_to_alive(W, alive, self.failure_policy)
        mixed = self.combine(W, returned, alive)
        self.update_state(server_round, returned, mixed, alive)
        live_links = int(sp.csr_matrix(W).nnz - m)  # off-diagonal non-zeros = models sent peer-to-peer
        metrics: dict[str, Scalar] = {
            "consensus_distance": consensus_distance(self.models.data),
            "failures": n_failed,
            "links": live_links,
            "p2p_bytes": live_links * self.layout.size * self.models.data.itemsize,
            "connected": int(is_connected(self.topology.graph(server_round - 1))),
        }
        if losses:
            metrics["train_loss"] = float(np.mean(losses))
        if m <= 256:
            metrics["spectral_gap"] = 1.0 - second_eigenvalue_modulus(self.mixing_matrix(server_round))
        return ndarrays_to_parameters(self.network_average()), metrics

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, EvaluateIns]]:
        return []

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[tuple[ClientProxy, EvaluateRes] | BaseException],
    ) -> tuple[Optional[float], dict[str, Scalar]]:
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters) -> Optional[tuple[float, dict[str, Scalar]]]:
        if self.evaluate_fn is None:
            return None
        res = self.evaluate_fn(server_round, self.network_average(), {})
        if res is None:
            return None
        loss, metrics = res
        metrics = dict(metrics)
        metrics["consensus_distance"] = consensus_distance(self.models.data)
        if self.client_eval_every and server_round % self.client_eval_every == 0:
            ids = range(self.num_clients if self.client_eval_max is None else min(self.num_clients, self.client_eval_max))
            accs = []
            for i in ids:
                r = self.evaluate_fn(server_round, self.models.row_arrays(i), {})
                if r is not None and "accuracy" in r[1]:
                    accs.append(float(r[1]["accuracy"]))
            if accs:
                metrics["client_accuracy_mean"] = float(np.mean(accs))
                metrics["client_accuracy_min"] = float(np.min(accs))
        return float(loss), metrics


# ---------------------------------------------------------------------------------------------------
# Core-based legacy adapter
# ---------------------------------------------------------------------------------------------------
from ..adapters.legacy import LegacyStrategy  # noqa: E402
from .config import GraphConfig  # noqa: E402

_GRAPH_KEYS = ("neighbours", "topology_p", "ws_k", "weights", "allow_row_stochastic", "allow_disconnected",
               "failure_policy", "client_eval_every", "client_eval_max")


def graph_config(topology: "str | Topology", graph: dict[str, Any]) -> tuple[GraphConfig, Topology | None]:
    """A validated :class:`GraphConfig` from a topology name (or object) and graph keyword arguments;
    the second value is the explicit :class:`Topology` when one was given."""
    unknown = set(graph) - set(_GRAPH_KEYS)
    if unknown:
        raise TypeError(f"unexpected graph arguments {sorted(unknown)}; valid: {sorted(_GRAPH_KEYS)}")
    if isinstance(topology, Topology):
        return GraphConfig(topology=topology.name, **graph), topology
    return GraphConfig(topology=topology, **graph), None


class DecentralizedLegacyStrategy(LegacyStrategy):
    """Legacy Flower strategy of a peer-graph method (the server emulates the peers' network).

    Parameters
    ----------
    num_clients : int
        Number of peers m (>= 2); the clients' partition ids must be ``0..m-1``.
    initial_parameters : list[np.ndarray] | Parameters
        Common initial model of every peer.
    topology : str | Topology (default: "random")
        Peer graph: a name (see :class:`~flwr_strategies.decentralized.config.GraphConfig`) or a
        :class:`Topology` on m nodes. Round t uses graph t (redrawn each round when time-varying).
    neighbours, topology_p, ws_k, weights, allow_row_stochastic, allow_disconnected, failure_policy, \
client_eval_every, client_eval_max
        Graph settings, as :class:`~flwr_strategies.decentralized.config.GraphConfig` (defaults:
        10, -1.0, 8, "auto", False, None, "renormalize", 0, 0). With ``client_eval_every`` k > 0,
        ``evaluate_fn`` also scores every peer's own model every k rounds (the registered methods
        use k = 1; here it is off by default, since it multiplies the evaluation cost by m).
    evaluate_fn : callable | None (default: None)
        Flower's ``evaluate_fn(server_round, ndarrays, config) -> (loss, metrics)``; scores the
        network-average model and, every ``client_eval_every`` rounds, the peers' own models.
    on_fit_config_fn : callable | None (default: None)
        ``server_round -> dict`` sent to every peer (lr, local epochs, batch size, seed).
    seed : int (default: 0)
        Seed of the peer graphs, >= 0.
    dtype : numpy dtype (default: float32)
        dtype of the server's model tables.
    on_bad_reply : str (default: "drop")
        ``"drop"`` (a bad reply counts as a failed peer) or ``"raise"``.
    min_available_clients : int | None (default: None)
        Clients that must be connected before a round (None: all m).
    **kwargs
        Further :class:`~flwr_strategies.adapters.legacy.LegacyStrategy` arguments
        (``partition_resolver``, ``on_round_end``, ``fraction_evaluate``, ``wait_timeout``...).
    """

    def __init__(
        self,
        *,
        num_clients: int,
        initial_parameters: list[np.ndarray] | Parameters,
        topology: "str | Topology" = "random",
        evaluate_fn: EvalFn | None = None,
        on_fit_config_fn: Callable[[int], dict[str, Scalar]] | None = None,
        seed: int = 0,
        dtype: Any = np.float32,
        on_bad_reply: str = "drop",
        min_available_clients: int | None = None,
        neighbours: int = 10,
        topology_p: float = -1.0,
        ws_k: int = 8,
        weights: str = "auto",
        allow_row_stochastic: bool = False,
        allow_disconnected: bool | None = None,
        failure_policy: str = "renormalize",
        client_eval_every: int = 0,
        client_eval_max: int = 0,
        **kwargs: Any,
    ) -> None:
        if initial_parameters is None:
            raise ValueError("initial_parameters is required: every peer starts from it")
        if isinstance(initial_parameters, Parameters):
            initial_parameters = parameters_to_ndarrays(initial_parameters)
        graph, top = graph_config(topology, dict(
            neighbours=neighbours, topology_p=topology_p, ws_k=ws_k, weights=weights,
            allow_row_stochastic=allow_row_stochastic, allow_disconnected=allow_disconnected,
            failure_policy=failure_policy, client_eval_every=client_eval_every, client_eval_max=client_eval_max))
        core = self.build_core(
            [np.asarray(a) for a in initial_parameters],
            num_partitions=num_clients, graph=graph, topology=top, seed=seed,
            on_train_config=on_fit_config_fn, dtype=dtype,
        )
        super().__init__(core, evaluate_fn=evaluate_fn, on_bad_reply=on_bad_reply,
                         min_available_clients=num_clients if min_available_clients is None else min_available_clients,
                         **kwargs)

    def build_core(self, initial_arrays: list[np.ndarray], **core_kwargs: Any):
        """The method's core (``core_kwargs``: the :class:`DecentralizedCore` arguments)."""
        from .server import GossipCore

        return GossipCore(initial_arrays, **core_kwargs)
