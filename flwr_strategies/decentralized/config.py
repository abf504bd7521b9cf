"""The peer graph and gossip settings of every decentralized method (frozen, validated).

:class:`GraphConfig` is what every peer-graph method shares (DFedCata, DFedAvg(M), DFedSAM, D-PSGD,
DO-ADP, D-mSGD, DPDO, DP-DDA, CPGT): which graph the peers form each round (``topology``,
``neighbours``), how the mixing weights are set (``weights``), what happens when a peer fails
(``failure_policy``), and how often the peers' own models are scored. ``GraphConfig.build(num_nodes,
seed)`` builds the seeded :class:`~flwr_strategies.decentralized.topology.Topology`; every impossible
setting (a graph that can never carry a link, a probability outside its range, an unknown name)
raises ``ValueError`` naming the setting and the value, before any training. A neighbourhood larger
than the network becomes the complete graph, logged and reported (see ``neighbours``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core.declare import setting
from ..core.validation import check_choice, check_integer, is_int
from .topology import Topology, canonical_topology, check_neighbours

__all__ = ["GraphConfig", "WEIGHTS", "FAILURE_POLICIES"]

#: mixing-weight rules accepted by :func:`~flwr_strategies.decentralized.mixing.mixing_matrix`
WEIGHTS = ("auto", "uniform", "metropolis_hastings", "mh")
#: what a failed peer does to a round: its neighbours mix over the live peers (their rows
#: renormalised, or the lost weight given to themselves, see :func:`~.mixing.restrict_to_alive`),
#: or the run stops
FAILURE_POLICIES = ("renormalize", "self", "stop")


@dataclass(frozen=True)
class GraphConfig:
    """Peer graph, mixing weights and failure handling of a decentralized run."""

    topology: str = setting("random", "a name of TOPOLOGIES, or 'fixed'",
                            "paper: DFedCata App. A-B (a random bidirectional graph redrawn every round)",
                            "``random`` (DFedCata paper, Sec. V-A: every round each peer picks ``neighbours - 1`` "
                            "others, redrawn each round), ``random_code`` (the same recipe drawn with the official "
                            "code's legacy NumPy seeding, so the graphs are the official code's), ``circulant`` "
                            "(DO-ADP paper, Sec. V: ``i`` linked to ``i +- 1..(neighbours - 1)/2``), ``ring``, "
                            "``grid``, ``exponential``, ``exponential_sym``, ``full``, ``erdos_renyi`` (``er``), "
                            "``watts_strogatz`` (``ws``); ``fixed`` for a "
                            ":meth:`~flwr_strategies.decentralized.topology.Topology.from_adjacency` graph passed "
                            "to the core.")
    neighbours: int = setting(10, ">= 2 (odd for circulant)",
                              "paper: DFedCata App. A-B (each client picks 10 neighbours per round)",
                              "Size of a peer's neighbourhood, the peer itself included, for ``random``/"
                              "``random_code`` (picks per peer and round: the DFedCata paper's \"10% of 100 "
                              "clients\") and ``circulant`` (odd: the DO-ADP paper's ``+-1, 2, 3`` is 7); fewer than "
                              "2 forms no link. More than the number of peers links every peer to every other (the "
                              "complete graph, on which a decentralized method averages like its centralized "
                              "counterpart): logged as a warning and reported in every round's metrics "
                              "(``graph_adjusted = 1``), never silently.")
    topology_p: float = setting(-1.0, "<= 1 (negative: the generator's default)",
                                "paper: DFedCata Sec. V-D (-1 = Erdos-Renyi p 0.1, Watts-Strogatz rewiring 0.02)",
                                "Edge probability of ``erdos_renyi`` (in (0, 1]; 0 would never link) or rewiring "
                                "probability of ``watts_strogatz`` (in [0, 1]). Negative means the generator's "
                                "default (0.1 and 0.02, the paper's values).")
    ws_k: int = setting(8, "even, >= 2", "paper: DFedCata Sec. V-D (Watts-Strogatz: 8 adjacent neighbours)",
                        "Nearest neighbours of the ``watts_strogatz`` lattice: even, 0 < k < number of peers.")
    weights: str = setting("auto", "auto, uniform, metropolis_hastings (mh)",
                           "project: Metropolis-Hastings on irregular graphs (uniform on regular ones) keeps the "
                           "average; the official code averages uniformly over {i} + N_i (DFedCata's "
                           "server/DFedCata.py), only row-stochastic there (weights=uniform, dfedcata-code preset)",
                           "``auto`` (uniform on regular graphs, Metropolis-Hastings otherwise), ``uniform`` (the "
                           "official code's ``1/(deg+1)``; row-stochastic on irregular graphs) or "
                           "``metropolis_hastings`` (``mh``).")
    allow_row_stochastic: bool = setting(False, "bool",
                                         "project: refuse mixing that does not preserve the average unless asked",
                                         "Accept mixing matrices that are only row-stochastic (uniform weights on "
                                         "irregular graphs).")
    allow_disconnected: bool | None = setting(None, "None (auto), True, False",
                                              "project: None (auto) = accept a disconnected round only on graphs "
                                              "redrawn every round",
                                              "Accept a round whose graph is disconnected. None: yes for graphs "
                                              "redrawn every round (only the union over rounds must connect; rounds "
                                              "report ``connected``), no for static graphs.")
    failure_policy: str = setting("renormalize", "renormalize, self, stop",
                                  "project: live peers renormalise their rows when a neighbour fails (the papers "
                                  "have no failures)",
                                  "What a failed peer (one that errs, whose reply is rejected, or whose node is no "
                                  "longer connected) does to a round. It is counted in the round's ``failures`` in "
                                  "every policy and keeps its state; ``renormalize``: the live peers mix over the "
                                  "live peers, their rows renormalised; ``self``: they give the lost weight to "
                                  "themselves (keeps a doubly stochastic matrix doubly stochastic); ``stop``: the "
                                  "run stops with :class:`~flwr_strategies.decentralized.server.PeerFailure`, the "
                                  "state unchanged.")
    client_eval_every: int = setting(1, ">= 0 (0: never)",
                                     "project: score the peers' own models every round (the papers score their "
                                     "average)",
                                     "Score the peers' own models on the central test set every this many "
                                     "(algorithm) rounds. Costs one test-set pass per peer; with k > 0, "
                                     "``evaluate_fn`` also scores every peer's own model every k rounds.")
    client_eval_max: int = setting(0, ">= 0 (0: all)", "project: 0 = score every peer",
                                   "Score at most this many peers (lowest ids first).")

    def __post_init__(self) -> None:
        object.__setattr__(self, "topology", canonical_topology(self.topology))
        object.__setattr__(self, "neighbours", check_neighbours(self.topology, self.neighbours))
        p = self.topology_p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or math.isnan(p) or math.isinf(p) or p > 1.0:
            raise ValueError(f"topology_p must be a probability in [0, 1] (negative: generator default), got {p!r}")
        if self.topology == "erdos_renyi" and p == 0.0:
            raise ValueError("topology_p = 0 gives an Erdos-Renyi graph with no links: the peers would never "
                             "communicate; use a probability in (0, 1]")
        if not is_int(self.ws_k) or self.ws_k < 2 or self.ws_k % 2:
            raise ValueError(f"ws_k must be an even integer >= 2, got {self.ws_k!r}")
        w = self.weights.lower().replace("-", "_") if isinstance(self.weights, str) else self.weights
        if w not in WEIGHTS:
            raise ValueError(f"weights must be one of {WEIGHTS}, got {self.weights!r}")
        object.__setattr__(self, "weights", "metropolis_hastings" if w == "mh" else w)
        if not isinstance(self.allow_row_stochastic, bool):
            raise ValueError(f"allow_row_stochastic must be a bool, got {self.allow_row_stochastic!r}")
        if self.allow_disconnected is not None and not isinstance(self.allow_disconnected, bool):
            raise ValueError(f"allow_disconnected must be None, True or False, got {self.allow_disconnected!r}")
        check_choice("failure_policy", self.failure_policy, FAILURE_POLICIES)
        check_integer("client_eval_every", self.client_eval_every, 0)
        check_integer("client_eval_max", self.client_eval_max, 0)

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> "GraphConfig":
        """From registry hyperparameters (``--set`` values; ``allow_disconnected`` may be
        ``"auto"``/``"true"``/``"false"``). Keys that are not graph settings are ignored."""
        kw = {k: params[k] for k in cls.__dataclass_fields__ if k in params}
        ad = kw.get("allow_disconnected")
        if isinstance(ad, str):
            low = ad.strip().lower()
            table = {"auto": None, "none": None, "true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
            if low not in table:
                raise ValueError(f"allow_disconnected must be auto/true/false, got {ad!r}")
            kw["allow_disconnected"] = table[low]
        return cls(**kw)

    def build(self, num_nodes: int, seed: int = 0) -> Topology:
        """The seeded :class:`Topology` on ``num_nodes`` peers (>= 2)."""
        if not is_int(num_nodes) or num_nodes < 2:
            raise ValueError(f"a decentralized run needs at least 2 peers, got {num_nodes!r}")
        if self.topology == "fixed":
            raise ValueError("topology 'fixed' needs its adjacency: pass topology=Topology.from_adjacency(A)")
        if self.topology == "watts_strogatz" and not self.ws_k < num_nodes:
            raise ValueError(f"ws_k = {self.ws_k} must be < the number of peers ({num_nodes})")
        name, kw = self.topology, {}  # the generator's keyword arguments
        if name in ("random", "random_code", "circulant"):
            kw["neighbours"] = int(self.neighbours)
        if name in ("erdos_renyi", "watts_strogatz") and self.topology_p >= 0:
            kw["p"] = float(self.topology_p)
        if name == "watts_strogatz":
            kw["k"] = int(self.ws_k)
        return Topology(name, int(num_nodes), seed=int(seed), **kw)

    def disconnected_ok(self, topology: Topology) -> bool:
        """Whether a disconnected round is accepted for ``topology`` (see ``allow_disconnected``)."""
        return topology.time_varying if self.allow_disconnected is None else bool(self.allow_disconnected)
