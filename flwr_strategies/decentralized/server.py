"""The framework-neutral server core of every decentralized (peer-graph) method.

No real peer-to-peer links exist in a Flower run, so the server plays the network. It holds one
model per peer (partition id) in a contiguous ``(m, d)`` table, sends every peer *its own* start
point, and applies the gossip step ``X <- W^t Y`` sparsely (cost ~ edges x model size). The
bytes a real deployment would send peer to peer are reported as ``p2p_bytes``.

Memory is kept at the algorithm's floor. :class:`DecentralizedCore` owns the mixed models ``X`` and
one spare table ``S``; a method adds only the tables its algorithm needs (DFedCata: its
extrapolation anchors). Within a round nothing else of table size is allocated:

- start points are computed row by row, each into its row of ``S``, as the instructions are built
  (the instruction's arrays are views of that row, serialised by the adapter into the message);
- replies are written into the same preallocated ``S`` (rows of failed peers get their previous
  model), so the returned models never need a table of their own;
- mixing runs in place on ``S`` (through one column-block buffer of about 64 MiB) or into the table
  the method frees, and the tables are then rotated by reference, never copied.

Peak memory is therefore ``X + S`` (+ the method's tables) plus the messages in flight, and the
mixing costs ``nnz(W) x d`` multiply-adds.

A subclass (a method) implements:

- :meth:`DecentralizedCore.start_point`: write peer ``i``'s start point into a row buffer (default:
  its mixed model; DFedCata: the Nesterov-extrapolated point);
- :meth:`DecentralizedCore.commit`: the gossip step and the state shift, given ``S`` (the returned
  models) and the round's mixing matrix (default, DFedAvg: ``X <- W S``);
- :meth:`DecentralizedCore.client_config` (method constants sent to every peer) and, when it keeps
  more tables, :meth:`DecentralizedCore.method_tables` (checkpointed with the models).

Failures: a peer that fails, or whose reply is rejected, keeps its previous mixed model; its
neighbours mix over the peers that replied (``failure_policy``). A round in which no peer replied
changes nothing.

Metrics (training): ``consensus_distance`` (``mean_i ||x_i - x_bar||^2``), ``links`` (directed peer
links used), ``p2p_bytes``, ``connected``, ``spectral_gap`` (for m <= 256), ``train_loss`` (mean of the
peers'). Evaluation: the network-average model ``x_bar`` (what the DFedCata paper evaluates) on the
central test set, ``consensus_distance`` and, every ``client_eval_every`` rounds,
``client_accuracy_mean``/``client_accuracy_min`` of the peers' own models.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..core.messages import Instruction, Reply
from ..core.server import EvalFn, ServerCore
from .config import GraphConfig
from .consensus import consensus_distance, network_average
from .mixing import is_connected, mix, mixing_matrix, restrict_to_alive, second_eigenvalue_modulus
from .table import ModelLayout, ModelTable
from .topology import Topology

__all__ = ["DecentralizedCore"]

log = logging.getLogger(__name__)

#: spectral gaps are computed (dense eigensolve, O(m^3)) up to this many peers
SPECTRAL_GAP_MAX_PEERS = 256


class DecentralizedCore(ServerCore):
    """Decentralized FL (gossip over a peer graph) emulated by the server; DFedAvg by default.

    Parameters
    ----------
    initial_arrays : Sequence[np.ndarray]
        The common initial model ``x^0`` of every peer.
    num_partitions : int
        Number of peers m (>= 2); partition ids are ``0..m-1`` and are the graph's nodes.
    graph : GraphConfig | None (default: None)
        Topology, mixing weights, failure policy and peer-evaluation settings
        (:class:`~flwr_strategies.decentralized.config.GraphConfig`; None: its defaults, the
        DFedCata paper's random graph with 10 picks per peer and round).
    topology : Topology | None (default: None)
        An explicit peer graph instead of the one ``graph`` names (must have m nodes).
    seed : int (default: 0)
        Seed of the peer graphs (round t uses the graph of ``(seed, t)``), >= 0.
    on_train_config : callable | None (default: None)
        ``server_round -> dict`` of standard client settings (lr, local epochs, batch size, seed).
    fraction_train : float (default: 1.0)
        Must be 1: every peer trains every round (the DFedCata paper's "10% participation" only
        sets the neighbourhood size; use ``graph.neighbours``).
    dtype : numpy dtype (default: float32)
        dtype of the model tables.
    min_train : int (default: 1)
        Accepted for symmetry with the centralized cores; unused (all peers train).
    """

    full_participation = True

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
        dtype: Any = np.float32,
    ) -> None:
        if fraction_train != 1.0:
            raise ValueError(
                f"decentralized methods train every peer every round; got fraction_train (fraction_fit) = "
                f"{fraction_train!r}. The paper's 10% participation only sets the neighbourhood size: "
                "use the graph's neighbours setting"
            )
        if num_partitions is None or isinstance(num_partitions, bool) or int(num_partitions) != num_partitions or num_partitions < 2:
            raise ValueError(f"a decentralized run needs num_partitions >= 2 peers, got {num_partitions!r}")
        super().__init__(initial_arrays, num_partitions=int(num_partitions), fraction_train=1.0, min_train=1,
                         seed=seed, on_train_config=on_train_config)
        self.graph = graph if graph is not None else GraphConfig()
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
        try:
            self.dtype = np.dtype(dtype)
        except TypeError as err:
            raise ValueError(f"dtype {dtype!r} is not a NumPy dtype") from err
        if self.dtype.kind != "f":
            raise ValueError(f"dtype must be a floating dtype, got {self.dtype}")
        self.models = ModelTable.replicate(self.initial_arrays, self.num_partitions, dtype=self.dtype)
        self.layout: ModelLayout = self.models.layout
        self.spare = np.empty_like(self.models.data)  # start points, then returned models, then the new mix
        self._W_cache: tuple[int, sp.csr_matrix] | None = None
        self._xbar: tuple[int, list[np.ndarray]] | None = None
        self._version = 0  # bumped whenever the mixed models change
        self._consensus: tuple[int, float] | None = None
        self.mixing_matrix(1)  # a graph that cannot be mixed fails here, before any training

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_partitions={self.num_partitions}, d={self.layout.size}, "
                f"topology={self.topology.name!r}, weights={self.graph.weights!r})")

    # ------------------------------------------------------------------ method hooks
    def client_config(self, server_round: int) -> dict[str, Any]:
        """Method constants added to every peer's config (default: none)."""
        return {}

    def start_point(self, server_round: int, pid: int, out: np.ndarray) -> None:
        """Write peer ``pid``'s start point of ``server_round`` into the row buffer ``out``
        (default: its mixed model ``x_i^t``)."""
        np.copyto(out, self.models.data[pid])

    def commit(self, server_round: int, W: sp.csr_matrix, alive: np.ndarray) -> None:
        """Gossip step and state shift. ``self.spare`` holds the returned models (failed rows: their
        previous mixed model); ``W`` is the round's mixing matrix, already restricted to the live
        peers. Default (DFedAvg, adapt-then-combine): ``X <- W S``, in place, then swap the tables."""
        mix(W, self.spare, out=self.spare)
        self.models.data, self.spare = self.spare, self.models.data

    def method_tables(self) -> dict[str, np.ndarray]:
        """The method's own ``(m, d)`` tables beyond the mixed models, by name (checkpointed)."""
        return {}

    # ------------------------------------------------------------------ graph
    def graph_round(self, server_round: int) -> int:
        """Index ``t`` of the graph used by ``server_round`` (0 for the first round)."""
        return int(server_round) - 1

    def mixing_matrix(self, server_round: int) -> sp.csr_matrix:
        """``W^t`` of ``server_round`` (validated; cached for the round)."""
        t = self.graph_round(server_round)
        if self._W_cache is not None and self._W_cache[0] == t:
            return self._W_cache[1]
        W = mixing_matrix(
            self.topology.graph(t),
            self.graph.weights,
            allow_row_stochastic=self.graph.allow_row_stochastic,
            allow_disconnected=self.allow_disconnected,
        )
        self._W_cache = (t, W)
        return W

    # ------------------------------------------------------------------ rows and averages
    def row_arrays(self, pid: int) -> list[np.ndarray]:
        """Peer ``pid``'s mixed model in the layout of the initial arrays (a copy)."""
        return self.layout.unflatten(self.models.data[pid])

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
        for pid in partition_ids:
            row = self.spare[pid]
            self.start_point(server_round, pid, row)
            out.append(self.instruction(server_round, pid, row, dict(cfg)))
        return out

    def write_reply(self, reply: Reply, row: np.ndarray) -> None:
        """Flatten ``reply``'s arrays into ``row`` (nothing to do when they already are views of it)."""
        arrays = reply.arrays
        if arrays and all(isinstance(a, np.ndarray) and np.shares_memory(a, row) for a in arrays):
            return
        self.layout.flatten(arrays, out=row)

    def aggregate_train(self, server_round: int, replies: list[Reply], failed: list[int]) -> dict[str, Any]:
        m = self.num_partitions
        alive = np.zeros(m, dtype=bool)
        losses = []
        for reply in replies:
            self.write_reply(reply, self.spare[reply.partition_id])
            alive[reply.partition_id] = True
            loss = reply.metrics.get("train_loss")
            if isinstance(loss, (int, float, np.integer, np.floating)) and not isinstance(loss, bool):
                losses.append(float(loss))
        W_full = self.mixing_matrix(server_round)
        metrics: dict[str, Any] = {}
        if alive.any():
            dead = np.flatnonzero(~alive)
            W = W_full
            if dead.size:
                log.warning("round %s: %s of %s peers failed; they keep their previous model", server_round, dead.size, m)
                self.spare[dead] = self.models.data[dead]
                W = restrict_to_alive(W_full, alive, self.graph.failure_policy)
            self.commit(server_round, W, alive)
            self.touched()
            links = int(W.nnz - m)
        else:
            links = 0
        metrics.update(self.round_metrics(server_round, links, W_full))
        if losses:
            metrics["train_loss"] = float(np.mean(losses))
        return metrics

    def round_metrics(self, server_round: int, links: int, W: sp.csr_matrix) -> dict[str, Any]:
        """Consensus distance, links, peer-to-peer bytes, connectivity and spectral gap of a round."""
        out: dict[str, Any] = {
            "consensus_distance": self.consensus_distance(),
            "links": links,
            "p2p_bytes": links * self.layout.size * self.models.data.itemsize,
            "connected": int(is_connected(self.topology.graph(self.graph_round(server_round)))),
        }
        if self.num_partitions <= SPECTRAL_GAP_MAX_PEERS:
            out["spectral_gap"] = 1.0 - second_eigenvalue_modulus(W)
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
                r = evaluate_fn(server_round, self.row_arrays(i))
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
