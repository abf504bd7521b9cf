"""Message-API adapter of the decentralized cores: ``Strategy(...).start(grid=..., initial_arrays=...)``.

:class:`DecentralizedMessageStrategy` is a :class:`~flwr_strategies.adapters.message.MessageStrategy`
whose core is a :class:`~flwr_strategies.decentralized.server.DecentralizedCore`. The number of
peers is learned at ``start()`` (every node's ``partition-id``/``num-partitions``), so the
constructor takes only the method's and the graph's settings, validated at once. Every node trains
every round (``fraction_train`` is fixed at 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..adapters.message import MessageStrategy
from ..core.server import ConfigFn
from .config import GraphConfig
from .server import DecentralizedCore, GossipCore
from .topology import Topology

__all__ = ["DecentralizedMessageStrategy"]


class DecentralizedMessageStrategy(MessageStrategy):
    """Message-API strategy of a peer-graph method (the server emulates the peers' network).

    Parameters
    ----------
    topology : str | Topology (default: "random")
        Peer graph: a name (see :class:`~flwr_strategies.decentralized.config.GraphConfig`) or a
        :class:`Topology` (its node count must equal the number of partitions found at start).
    neighbours, topology_p, ws_k, weights, allow_row_stochastic, allow_disconnected, failure_policy, \\
client_eval_every, client_eval_max
        Graph settings, as :class:`~flwr_strategies.decentralized.config.GraphConfig` (defaults:
        10, -1.0, 8, "auto", False, None, "renormalize", 0, 0). ``client_eval_every`` defaults to 0
        here: with k > 0, your ``evaluate_fn`` also scores every peer's own model every k rounds
        (reported as ``client_accuracy_mean``/``client_accuracy_min``), which multiplies its cost
        by the number of peers.
    fraction_evaluate : float (default: 1.0)
        Fraction of nodes asked for federated evaluation of the network-average model, in [0, 1].
    min_evaluate_nodes : int (default: 2)
        Minimum number of nodes in federated evaluation, >= 0.
    min_available_nodes : int (default: 2)
        Nodes that must be connected before round 1, >= 1 (the strategy also waits for every
        partition the nodes report in ``num-partitions``).
    seed : int (default: 0)
        Seed of the peer graphs, >= 0.
    on_bad_reply : str (default: "drop")
        ``"drop"`` (a bad reply counts as a failed peer) or ``"raise"``.
    on_train_config_fn : callable | None (default: None)
        ``server_round -> dict`` merged into every training config (lr schedule, local epochs...).
    dtype : numpy dtype (default: float32)
        dtype of the server's model tables.
    **kwargs
        Further :class:`~flwr_strategies.adapters.message.MessageStrategy` arguments
        (``weighted_by_key``, ``arrayrecord_key``, ``configrecord_key``, ``wait_timeout``,
        ``on_round_end``).
    """

    def __init__(
        self,
        *,
        topology: str | Topology = "random",
        neighbours: int = 10,
        topology_p: float = -1.0,
        ws_k: int = 8,
        weights: str = "auto",
        allow_row_stochastic: bool = False,
        allow_disconnected: bool | None = None,
        failure_policy: str = "renormalize",
        client_eval_every: int = 0,
        client_eval_max: int = 0,
        fraction_evaluate: float = 1.0,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int = 2,
        seed: int = 0,
        on_bad_reply: str = "drop",
        on_train_config_fn: ConfigFn | None = None,
        dtype: Any = np.float32,
        **kwargs: Any,
    ) -> None:
        if "fraction_train" in kwargs and kwargs.pop("fraction_train") != 1.0:
            raise ValueError("decentralized methods train every node every round: fraction_train must be 1.0")
        kwargs.pop("min_train_nodes", None)
        super().__init__(fraction_train=1.0, fraction_evaluate=fraction_evaluate, min_train_nodes=1,
                         min_evaluate_nodes=min_evaluate_nodes, min_available_nodes=min_available_nodes, seed=seed,
                         on_bad_reply=on_bad_reply, on_train_config_fn=on_train_config_fn, **kwargs)
        graph = dict(neighbours=neighbours, topology_p=topology_p, ws_k=ws_k, weights=weights,
                     allow_row_stochastic=allow_row_stochastic, allow_disconnected=allow_disconnected,
                     failure_policy=failure_policy, client_eval_every=client_eval_every,
                     client_eval_max=client_eval_max)
        if isinstance(topology, Topology):
            self.graph, self.topology = GraphConfig(topology=topology.name, **graph), topology
        else:
            self.graph, self.topology = GraphConfig(topology=topology, **graph), None
        self.dtype = np.dtype(dtype)

    def build_core(self, initial_arrays: list[np.ndarray], num_partitions: int) -> DecentralizedCore:
        return self.build_method_core(
            initial_arrays, num_partitions=num_partitions, graph=self.graph, topology=self.topology,
            seed=self.seed, on_train_config=self.on_train_config_fn, dtype=self.dtype,
        )

    def build_method_core(self, initial_arrays: list[np.ndarray], **core_kwargs: Any) -> DecentralizedCore:
        """The method's core (``core_kwargs``: the :class:`DecentralizedCore` arguments)."""
        return GossipCore(initial_arrays, **core_kwargs)
