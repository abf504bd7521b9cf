"""The framework-neutral server core of every decentralized (peer-graph) method.

No real peer-to-peer links exist in a Flower run, so the server plays the network. Every
decentralized method (DFedCata, DFedAvg(M), DFedSAM, D-PSGD, DO-ADP, D-mSGD, DPDO, DP-DDA, CPGT)
runs on :class:`DecentralizedCore`, which does what they all share, once:

- **the graph**: a :class:`~flwr_strategies.decentralized.config.GraphConfig` (``topology``,
  ``neighbours``, ``weights``...) or an explicit :class:`~flwr_strategies.decentralized.topology.Topology`;
  round ``t``'s validated mixing matrix ``W^t`` (:meth:`DecentralizedCore.mixing_matrix`), its
  spectral gap, links and connectivity (:meth:`DecentralizedCore.graph_metrics`);
- **participation and failures**: every peer takes part in every round. A peer that errs, whose
  reply is rejected, or whose node is no longer connected is a failed peer: it is counted in the
  round's ``failures`` (``absent`` counts the peers that were not connected), logged, and handled
  by ``failure_policy``: the live peers mix over the live peers (``"renormalize"`` or ``"self"``,
  :meth:`DecentralizedCore.live_mixing`), or the run stops (``"stop"``, :class:`PeerFailure`, with
  the state unchanged);
- the model layout (flatten / unflatten of the initial arrays).

Two families build on it:

- :class:`GossipCore` (here): the server holds one model per peer and applies the gossip step
  ``X <- W^t Y`` to the returned models (DFedAvg; DFedCata and D-PSGD in
  :mod:`flwr_strategies.dfedcata.server`);
- :class:`~flwr_strategies.doadp.peer.PublicTableCore`: the server holds only the public tables the
  agents broadcast, never a client's private model or randomness (DO-ADP and its baselines).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..core.messages import Instruction, Reply
from ..core.server import EvalFn, RoundResult, ServerCore
from ..core.validation import ReplyError, is_real
from .config import GraphConfig
from .consensus import consensus_distance, network_average
from .mixing import is_connected, mix, mixing_matrix, restrict_to_alive, spectral_gap
from .table import ModelLayout, ModelTable
from .topology import Topology

__all__ = ["DecentralizedCore", "GossipCore", "PeerFailure", "SPECTRAL_GAP_MAX_PEERS"]

log = logging.getLogger(__name__)

#: spectral gaps are computed (dense eigensolve, O(m^3)) up to this many peers
SPECTRAL_GAP_MAX_PEERS = 256


class PeerFailure(RuntimeError):
    """A peer failed in a run whose ``failure_policy`` is ``"stop"`` (nothing was changed)."""


class DecentralizedCore(ServerCore):
    """Base of every decentralized core: the peer graph, participation and failures.

    Parameters
    ----------
    initial_arrays : Sequence[np.ndarray]
        The common initial model ``x^0`` of every peer.
    num_partitions : int
        Number of peers m (>= 2); partition ids are ``0..m-1`` and are the graph's nodes.
    graph : GraphConfig | None (default: None)
        Topology, neighbourhood size, mixing weights, failure policy and peer-evaluation settings
        (None: the method's paper graph, :attr:`graph_defaults` over the
        :class:`~flwr_strategies.decentralized.config.GraphConfig` defaults).
    topology : Topology | None (default: None)
        An explicit peer graph instead of the one ``graph`` names (must have m nodes), e.g.
        :meth:`Topology.from_adjacency(A) <flwr_strategies.decentralized.topology.Topology.from_adjacency>`.
    seed : int (default: 0)
        Seed of the peer graphs (round t uses the graph of ``(seed, t)``), >= 0.
    on_train_config : callable | None (default: None)
        ``server_round -> dict`` of standard client settings (lr, local epochs, batch size, seed).
    fraction_train : float (default: 1.0)
        Must be 1: every peer trains every round.
    min_train : int (default: 1)
        Unused (every peer trains); accepted like the centralized cores'.
    """

    full_participation = True
    #: whether clients may score the global model on their own data (federated evaluation)
    federated_evaluation_allowed = True
    #: the method's paper graph: :class:`GraphConfig` fields that differ from its defaults
    graph_defaults: dict[str, Any] = {}

    def __init__(
        self,
        initial_arrays: Sequence[np.ndarray],
        *,
        num_partitions: int,
        graph: GraphConfig | None = None,
        topology: Topology | None = None,
        seed: int = 0,
        on_train_config: Any = None,
        fraction_train: float = 1.0,
        min_train: int = 1,
    ) -> None:
        if fraction_train != 1.0:
            raise ValueError(
                f"decentralized methods train every peer every round; got fraction_train (fraction_fit) = "
                f"{fraction_train!r}. A paper's partial participation only sets the neighbourhood size: "
                "use the graph's neighbours setting"
            )
        if (num_partitions is None or isinstance(num_partitions, bool) or int(num_partitions) != num_partitions
                or num_partitions < 2):
            raise ValueError(f"a decentralized run needs num_partitions >= 2 peers, got {num_partitions!r}")
        super().__init__(initial_arrays, num_partitions=int(num_partitions), fraction_train=1.0, min_train=1,
                         seed=seed, on_train_config=on_train_config)
        self.graph = graph if graph is not None else self.default_graph()
        if not isinstance(self.graph, GraphConfig):
            raise TypeError(f"graph must be a GraphConfig, got {type(self.graph).__name__}")
        if topology is None:
            topology = self.graph.build(self.num_partitions, self.seed)
        elif not isinstance(topology, Topology):
            raise TypeError(f"topology must be a Topology, got {type(topology).__name__}")
        if topology.num_nodes != self.num_partitions:
            raise ValueError(f"topology has {topology.num_nodes} nodes but num_partitions = {self.num_partitions}")
        self.topology = topology
        self.allow_disconnected = self.graph.disconnected_ok(topology)
        self.layout: ModelLayout = ModelLayout.of(self.initial_arrays)
        self._W_cache: tuple[int, sp.csr_matrix] | None = None
        self._gap_cache: tuple[int, float] | None = None
        self._absent: tuple[int, list[int]] = (-1, [])
        self.mixing_matrix(1)  # a graph that cannot be mixed fails here, before any training

    @classmethod
    def default_graph(cls, **settings: Any) -> GraphConfig:
        """The method's :class:`GraphConfig`: its paper graph (:attr:`graph_defaults`) with ``settings``."""
        return GraphConfig(**{**cls.graph_defaults, **settings})

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_partitions={self.num_partitions}, d={self.layout.size}, "
                f"topology={self.topology.name!r}, weights={self.graph.weights!r})")

    # ------------------------------------------------------------------ graph
    def graph_round(self, server_round: int) -> int:
        """Index ``t`` of the graph used by ``server_round`` (0 for the first round)."""
        return int(server_round) - 1

    def mixing_matrix(self, server_round: int) -> sp.csr_matrix:
        """``W^t`` of ``server_round`` (validated; cached for the round)."""
        t = self.graph_round(server_round)
        key = t if self.topology.time_varying else 0
        if self._W_cache is not None and self._W_cache[0] == key:
            return self._W_cache[1]
        W = mixing_matrix(
            self.topology.graph(t),
            self.graph.weights,
            allow_row_stochastic=self.graph.allow_row_stochastic,
            allow_disconnected=self.allow_disconnected,
        )
        self._W_cache = (key, W)
        return W

    def live_mixing(self, server_round: int, alive: np.ndarray) -> sp.csr_matrix:
        """``W^t`` restricted to the live peers by ``failure_policy`` (a failed peer keeps its own
        row only; :func:`~flwr_strategies.decentralized.mixing.restrict_to_alive`)."""
        W = self.mixing_matrix(server_round)
        if bool(np.all(alive)):
            return W
        return restrict_to_alive(W, alive, "self" if self.graph.failure_policy == "self" else "renormalize")

    def spectral_gap(self, server_round: int) -> float | None:
        """``1 - |lambda_2(W^t)|`` (None above :data:`SPECTRAL_GAP_MAX_PEERS` peers)."""
        if self.num_partitions > SPECTRAL_GAP_MAX_PEERS:
            return None
        t = self.graph_round(server_round)
        key = t if self.topology.time_varying else 0
        if self._gap_cache is None or self._gap_cache[0] != key:
            self._gap_cache = (key, spectral_gap(self.mixing_matrix(server_round)))
        return self._gap_cache[1]

    def graph_metrics(self, server_round: int, W: sp.csr_matrix) -> dict[str, Any]:
        """``links`` (directed peer links of the mixing actually applied, ``W``), ``connected`` and
        ``spectral_gap`` (of the round's full ``W^t``); ``graph_adjusted = 1`` when the graph is not
        the one requested (a neighbourhood larger than the network, see
        :attr:`Topology.adjustment <flwr_strategies.decentralized.topology.Topology.adjustment>`)."""
        out: dict[str, Any] = {
            "links": int(W.nnz - self.num_partitions),
            "connected": int(is_connected(self.topology.graph(self.graph_round(server_round)))),
        }
        if self.topology.adjustment is not None:
            out["graph_adjusted"] = 1
        gap = self.spectral_gap(server_round)
        if gap is not None:
            out["spectral_gap"] = gap
        return out

    # ------------------------------------------------------------------ participation and failures
    def expected_peers(self, server_round: int) -> list[int]:
        """Peers that take part in ``server_round`` (default: all of them)."""
        return list(range(self.num_partitions))

    def alive_mask(self, partition_ids: Iterable[int]) -> np.ndarray:
        """Boolean mask of ``partition_ids`` over the m peers."""
        alive = np.zeros(self.num_partitions, dtype=bool)
        alive[[int(p) for p in partition_ids]] = True
        return alive

    def select(self, server_round: int, available: Iterable[int]) -> list[int]:
        """Every available peer. An expected peer that is not available (its node is no longer
        connected) is a failed peer of the round: counted, logged, and under ``failure_policy="stop"``
        the run stops here."""
        chosen = super().select(server_round, available)
        absent = sorted(set(self.expected_peers(server_round)) - set(chosen))
        self._absent = (int(server_round), absent)
        if absent:
            log.warning("round %s: peers %s are not connected (failed)", server_round, absent)
            if self.graph.failure_policy == "stop":
                raise PeerFailure(f"{type(self).__name__} round {server_round}: peers {absent} are not connected "
                                  "and failure_policy='stop'")
        return chosen

    def train_round(self, server_round: int, replies: Iterable[Reply], *, sampled: Iterable[int],
                    failed: Iterable[int] = (), on_bad_reply: str = "drop",
                    max_num_examples: int | Mapping[int, int] | None = None) -> RoundResult:
        """:meth:`ServerCore.train_round` with every expected peer counted: a peer that was not
        connected at :meth:`select` is a failure too (``failures``; ``absent`` counts them)."""
        rnd, absent = self._absent
        absent = absent if rnd == int(server_round) else []
        self._absent = (-1, [])
        replies, sampled, failed = list(replies), {int(p) for p in sampled}, [int(p) for p in failed]
        if self.graph.failure_policy == "stop":
            missing = sorted((sampled - {r.partition_id for r in replies}) | set(failed) | set(absent))
            if missing:
                raise PeerFailure(f"{type(self).__name__} round {server_round}: peers {missing} failed "
                                  "and failure_policy='stop'")
            try:
                result = super().train_round(server_round, replies, sampled=sampled, failed=failed,
                                             on_bad_reply="raise", max_num_examples=max_num_examples)
            except ReplyError as err:
                raise PeerFailure(f"{err} (failure_policy='stop')") from err
        else:
            result = super().train_round(server_round, replies, sampled=sampled | set(absent), failed=failed,
                                         on_bad_reply=on_bad_reply, max_num_examples=max_num_examples)
        result["absent"] = len(absent)
        if "links" not in result:  # no valid reply, no mixing applied (0 links); the round's graph is still reported
            result.update(self.graph_metrics(server_round, sp.identity(self.num_partitions, format="csr")))
        return result


class GossipCore(DecentralizedCore):
    """Decentralized FL by gossip of whole models (DFedAvg by default): the server holds one model
    per peer, sends every peer *its own* start point and applies ``X <- W^t Y`` to the returned
    models, sparsely (cost ~ edges x model size). The bytes a real deployment would send peer to
    peer are reported as ``p2p_bytes``.

    Memory is kept at the algorithm's floor: the core owns the mixed models ``X`` and, while a
    round's instructions are built, one spare table ``S``; a method adds only the tables its
    algorithm needs (DFedCata: its extrapolation anchors). Start points are computed row by row into
    ``S`` (the instruction's arrays are views of the row); once the adapter has serialized them
    (:meth:`instructions_sent`), ``S`` is released, so it is not held while the replies are in
    flight. The replies are written into a table whose rows the step no longer needs
    (:meth:`returned_table`; DFedAvg: ``X`` itself, whose failed rows already hold their previous
    models), mixing runs in place through one column-block buffer of about 64 MiB, and the tables
    are rotated by reference. Replies arrive from the adapters as read-only views of the messages'
    bytes, so they add nothing either. Peak memory is ``X`` (+ the method's tables) plus the
    messages in flight, and ``S`` while the instructions are built; methods whose step needs the
    returned models beside ``X`` (D-PSGD, DFedCata's ``"prev_local"`` anchors) keep ``S``.

    A method implements :meth:`start_point` (default: the mixed model), :meth:`returned_table` and
    :meth:`commit` (default: DFedAvg's adapt-then-combine ``X <- W Y``, in place in ``X``),
    :meth:`client_config` and, when it keeps more tables, :meth:`method_tables` (checkpointed with
    the models).

    Failures: a failed peer keeps its previous mixed model; the live peers mix over the peers that
    replied (``failure_policy``). A round in which no peer replied changes nothing.

    Metrics (training): ``consensus_distance`` (``mean_i ||x_i - x_bar||^2``), ``links``,
    ``p2p_bytes``, ``connected``, ``spectral_gap`` (for m <= 256), ``train_loss`` (mean of the
    peers'). Evaluation: the network-average model ``x_bar`` (what the DFedCata paper evaluates,
    Algorithm 1's output) on the central test set, ``consensus_distance`` and, every ``client_eval_every`` rounds,
    ``client_accuracy_mean``/``client_accuracy_min`` of the peers' own models.

    Parameters
    ----------
    initial_arrays, num_partitions, graph, topology, seed, on_train_config, fraction_train, min_train
        As :class:`DecentralizedCore` (default graph: the DFedCata paper's random graph with
        neighbourhoods of 10, redrawn every round).
    dtype : numpy dtype (default: float32)
        dtype of the model tables.
    """

    def __init__(self, initial_arrays: Sequence[np.ndarray], *, dtype: Any = np.float32, **kwargs: Any) -> None:
        super().__init__(initial_arrays, **kwargs)
        try:
            self.dtype = np.dtype(dtype)
        except TypeError as err:
            raise ValueError(f"dtype {dtype!r} is not a NumPy dtype") from err
        if self.dtype.kind != "f":
            raise ValueError(f"dtype must be a floating dtype, got {self.dtype}")
        self.models = ModelTable.replicate(self.initial_arrays, self.num_partitions, dtype=self.dtype)
        self.spare: np.ndarray | None = np.empty_like(self.models.data)  # start points (see instructions_sent)
        self._xbar: tuple[int, list[np.ndarray]] | None = None
        self._version = 0  # bumped whenever the mixed models change
        self._consensus: tuple[int, float] | None = None

    # ------------------------------------------------------------------ method hooks
    def client_config(self, server_round: int) -> dict[str, Any]:
        """Method constants added to every peer's config (default: none)."""
        return {}

    def start_point(self, server_round: int, pid: int, out: np.ndarray) -> None:
        """Write peer ``pid``'s start point of ``server_round`` into the row buffer ``out``
        (default: its mixed model ``x_i^t``)."""
        np.copyto(out, self.models.data[pid])

    #: True when :meth:`returned_table` is the spare table (the step needs the returned models and
    #: the mixed models at once): the spare is then kept between rounds.
    keeps_spare = False

    def returned_table(self, server_round: int, alive: np.ndarray) -> np.ndarray:
        """The ``(m, d)`` table the round's returned models are written into (the rows of the live
        peers), with every failed peer's row already holding what it mixes: its previous mixed
        model. Called once every reply has been validated and the round's mixing matrix is known.
        Default (DFedAvg): ``X`` itself (the live peers' old mixed models are not needed again)."""
        return self.models.data

    def commit(self, server_round: int, W: sp.csr_matrix, alive: np.ndarray) -> None:
        """Gossip step and state shift. :meth:`returned_table` holds the returned models (failed
        rows: their previous mixed model); ``W`` is the round's mixing matrix, already restricted to
        the live peers. Default (DFedAvg, adapt-then-combine): ``X <- W X``, in place."""
        mix(W, self.models.data, out=self.models.data)

    def spare_table(self) -> np.ndarray:
        """The spare ``(m, d)`` table (allocated again when :meth:`instructions_sent` released it)."""
        if self.spare is None:
            self.spare = np.empty_like(self.models.data)
        return self.spare

    def instructions_sent(self, server_round: int) -> None:
        """The round's instructions are serialized: release the spare table they were views of,
        unless the method's step needs it (:attr:`keeps_spare`)."""
        if not self.keeps_spare:
            self.spare = None

    def method_tables(self) -> dict[str, np.ndarray]:
        """The method's own ``(m, d)`` tables beyond the mixed models, by name (checkpointed)."""
        return {}

    # ------------------------------------------------------------------ rows and averages
    def network_average(self) -> list[np.ndarray]:
        """``x_bar = (1/m) sum_i x_i`` in the layout of the initial arrays."""
        if self._xbar is None or self._xbar[0] != self._version:
            self._xbar = (self._version, self.layout.unflatten(network_average(self.models.data)))
        return self._xbar[1]

    def consensus_distance(self) -> float:
        """``mean_i ||x_i - x_bar||^2`` of the mixed models (computed once per state)."""
        if self._consensus is None or self._consensus[0] != self._version:
            self._consensus = (self._version, consensus_distance(self.models.data))
        return self._consensus[1]

    def touched(self) -> None:
        """Mark the mixed models as changed (invalidates the cached average and consensus)."""
        self._version += 1

    # ------------------------------------------------------------------ ServerCore
    def global_arrays(self) -> list[np.ndarray]:
        return self.network_average()

    def instruction(self, server_round: int, pid: int, row: np.ndarray, config: dict[str, Any]) -> Instruction:
        """The instruction carrying ``row`` (views of it where the dtypes allow)."""
        return Instruction(pid, self.layout.views(row), config)

    def configure_train(self, server_round: int, partition_ids: list[int]) -> list[Instruction]:
        self.mixing_matrix(server_round)  # draw and validate W^t before anyone trains
        cfg = {**self.base_config(server_round), **self.client_config(server_round)}
        out = []
        spare = self.spare_table()
        for pid in partition_ids:
            row = spare[pid]
            self.start_point(server_round, pid, row)
            out.append(self.instruction(server_round, pid, row, dict(cfg)))
        return out

    def write_reply(self, reply: Reply, row: np.ndarray) -> None:
        """Flatten ``reply``'s arrays into ``row`` (nothing to do when they already are views of it;
        the adapters hand over read-only views of the messages' bytes: one copy, here)."""
        arrays = reply.arrays
        if arrays and all(isinstance(a, np.ndarray) and np.shares_memory(a, row) for a in arrays):
            return
        self.layout.flatten(arrays, out=row)

    def aggregate_train(self, server_round: int, replies: list[Reply], failed: list[int]) -> dict[str, Any]:
        alive = self.alive_mask(r.partition_id for r in replies)
        losses = [float(r.metrics["train_loss"]) for r in replies if is_real(r.metrics.get("train_loss"))]
        if alive.any():
            dead = np.flatnonzero(~alive)
            if dead.size:
                log.warning("round %s: %s of %s peers failed; they keep their previous model", server_round,
                            dead.size, self.num_partitions)
            W = self.live_mixing(server_round, alive)  # before any table changes
            Y = self.returned_table(server_round, alive)
            for reply in replies:
                self.write_reply(reply, Y[reply.partition_id])
            self.commit(server_round, W, alive)
            self.touched()
            links = int(W.nnz - self.num_partitions)
        else:
            links = 0
        metrics = self.round_metrics(server_round, links)
        if losses:
            metrics["train_loss"] = float(np.mean(losses))
        return metrics

    def round_metrics(self, server_round: int, links: int) -> dict[str, Any]:
        """Consensus distance, links, peer-to-peer bytes, connectivity and spectral gap of a round."""
        out = self.graph_metrics(server_round, self.mixing_matrix(server_round))
        out["links"] = int(links)
        out["p2p_bytes"] = int(links) * self.layout.size * self.models.data.itemsize
        out["consensus_distance"] = self.consensus_distance()
        return out

    def evaluation_round(self, server_round: int) -> int:
        """The algorithm round ``server_round`` completes (for ``client_eval_every``)."""
        return int(server_round)

    def evaluate(self, server_round: int, evaluate_fn: EvalFn) -> tuple[float, dict[str, Any]] | None:
        res = evaluate_fn(server_round, self.global_arrays())
        if res is None:
            return None
        loss, metrics = res
        metrics = dict(metrics)
        metrics["consensus_distance"] = self.consensus_distance()
        every, most = self.graph.client_eval_every, self.graph.client_eval_max
        if every and self.evaluation_round(server_round) % every == 0:
            ids = range(self.num_partitions if not most else min(self.num_partitions, most))
            accs = []
            for i in ids:
                r = evaluate_fn(server_round, self.models.row_arrays(i))  # peer i's own mixed model
                if r is not None and "accuracy" in r[1]:
                    accs.append(float(r[1]["accuracy"]))
            if accs:
                metrics["client_accuracy_mean"] = float(np.mean(accs))
                metrics["client_accuracy_min"] = float(np.min(accs))
        return float(loss), metrics

    # ------------------------------------------------------------------ checkpoints
    def extra_state(self) -> dict[str, Any]:
        return {"models": self.models.data, **self.method_tables()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        tables = {"models": self.models.data, **self.method_tables()}
        missing = sorted(set(tables) - set(state))
        if missing:
            raise ValueError(f"checkpoint lacks the tables {missing}")
        for name, table in tables.items():
            arr = np.asarray(state[name])
            if arr.shape != table.shape:
                raise ValueError(f"checkpoint table '{name}' has shape {arr.shape}, expected {table.shape}")
        for name, table in tables.items():
            np.copyto(table, np.asarray(state[name]), casting="same_kind")
        self.touched()
