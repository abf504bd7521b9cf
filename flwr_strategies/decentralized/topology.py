"""Peer graphs for decentralized federated learning.

Every generator returns the adjacency of a graph on ``m`` nodes as a
``scipy.sparse.csr_matrix`` of 0/1 (no self loops). Node ``i`` is the client with
partition id ``i``. Undirected graphs have a symmetric adjacency; the one-sided
exponential graph is directed (``A[i, j] = 1`` means *i receives from j*).

:class:`Topology` wraps a generator with a seed and tells whether the graph is
redrawn every round (``time_varying``). ``Topology.graph(t)`` is a pure function
of ``(seed, t)``, so every backend sees the same graphs.

Names accepted by :class:`Topology` (m = number of clients):

========================  ================================================================
``ring``                  ``j = i +- 1 mod m`` (2 neighbours)
``grid``                  2-D torus ``rows x cols`` (4 neighbours); ``rows`` defaults to the
                          most square factorisation of m
``exponential``           one-sided circulant, ``j = i + 2^k mod m`` for ``2^k < m``
                          (directed; doubly stochastic with uniform weights)
``exponential_sym``       symmetric variant, offsets ``+-2^k``
``full``                  complete graph
``circulant``             ``j = i +- 1..h mod m`` with ``h = (neighbours - 1) / 2`` (the DO-ADP
                          paper's graph, Huo et al. Sec. V: ``neighbours = 7``, i.e. ``+-1, 2, 3``)
``erdos_renyi``           G(m, p), ``p`` default 0.1, redrawn every round (seed + t)
``watts_strogatz``        ring lattice with ``k`` (default 8) nearest neighbours, each edge
                          rewired with probability ``p`` (default 0.02, paper value); static
``random``                the DFedCata paper's default: every round each node draws
                          ``neighbours - 1`` (default 9) indices without replacement, the
                          upper triangle of the pick matrix is mirrored; mean degree ~9.
                          Redrawn every round.
``random_code``           the same recipe drawn exactly as the official DFedCata code draws it
                          (legacy ``np.random.seed(seed + t)`` stream), so its graphs are the
                          official code's graphs for the same seed.
``fixed``                 a given adjacency (:meth:`Topology.from_adjacency`)
========================  ================================================================

``neighbours`` (``random``, ``random_code``, ``circulant``) is the size of a peer's neighbourhood,
the peer itself included (its degree + 1; the mean degree + 1 for ``random``). A neighbourhood
larger than the network (``neighbours > num_nodes``) cannot be drawn: every peer is then linked to
every other. The :class:`Topology` says so: it logs a warning naming the setting, its value and
the node count, and records it (``Topology.adjustment``; the decentralized cores report it in every
round's metrics as ``graph_adjusted``), so the change of graph is never silent.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from ..core.validation import check_integer, is_int

__all__ = [
    "Topology",
    "TOPOLOGIES",
    "ring",
    "grid",
    "exponential",
    "full",
    "circulant",
    "erdos_renyi",
    "watts_strogatz",
    "random_k",
    "round_rng",
    "ALIASES",
    "canonical_topology",
]

log = logging.getLogger(__name__)

#: other accepted spellings of the topology names
ALIASES = {"exp": "exponential", "er": "erdos_renyi", "ws": "watts_strogatz", "complete": "full",
           "random10": "random", "random_10": "random", "torus": "grid"}


def round_rng(seed: int, t: int) -> np.random.Generator:
    """Seeded numpy Generator for round ``t`` (independent streams per round)."""
    return np.random.default_rng([int(seed), int(t), 0x70F0])


def _from_edges(m: int, rows, cols, symmetric: bool = True) -> sp.csr_matrix:
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    if symmetric:
        rows, cols = np.concatenate([rows, cols]), np.concatenate([cols, rows])
    keep = rows != cols
    a = sp.csr_matrix((np.ones(int(keep.sum())), (rows[keep], cols[keep])), shape=(m, m))
    a.sum_duplicates()
    a.data[:] = 1.0
    return a


def _offsets(m: int, offsets: list[int], symmetric: bool = True) -> sp.csr_matrix:
    """``i`` linked to ``(i + o) mod m`` for every offset ``o`` (both ways when ``symmetric``)."""
    i = np.arange(m)
    cols = (i + np.asarray(offsets, dtype=np.int64).reshape(-1, 1)) % m  # one row of targets per offset
    return _from_edges(m, np.tile(i, len(offsets)), cols.ravel(), symmetric=symmetric)


def ring(m: int) -> sp.csr_matrix:
    """Undirected ring: ``i`` linked to ``i-1`` and ``i+1`` (mod m)."""
    check_integer("number of nodes", m, 1)
    return _offsets(m, [1])


def grid(m: int, rows: int | None = None) -> sp.csr_matrix:
    """2-D torus (up/down/left/right, wrapping). ``rows`` must divide ``m``."""
    check_integer("number of nodes", m, 1)
    r = next(r for r in range(math.isqrt(m), 0, -1) if m % r == 0) if rows is None else int(rows)
    if r <= 0 or m % r:
        raise ValueError(f"grid rows={rows!r} must be a positive divisor of m={m}")
    c = m // r
    idx = np.arange(m).reshape(r, c)
    right = np.roll(idx, -1, axis=1)
    down = np.roll(idx, -1, axis=0)
    src = np.concatenate([idx.ravel(), idx.ravel()])
    dst = np.concatenate([right.ravel(), down.ravel()])
    return _from_edges(m, src, dst)


def exponential(m: int, symmetric: bool = False) -> sp.csr_matrix:
    """Exponential graph: offsets ``2^k < m``; one-sided (directed) unless ``symmetric``."""
    check_integer("number of nodes", m, 1)
    return _offsets(m, [1 << k for k in range(max(1, math.ceil(math.log2(m)))) if (1 << k) < m], symmetric)


def full(m: int) -> sp.csr_matrix:
    """Complete graph."""
    check_integer("number of nodes", m, 1)
    return sp.csr_matrix(np.ones((m, m)) - np.eye(m))


def circulant(m: int, neighbours: int = 7) -> sp.csr_matrix:
    """Circulant graph: ``i`` linked to ``(i +- j) mod m`` for ``j = 1..(neighbours - 1) / 2``
    (Huo et al., Sec. V: ``{(i, (i +- j) mod n) | j = 1, 2, 3}``, i.e. ``neighbours = 7``). The
    offsets wrap around, so ``neighbours > m`` gives the complete graph."""
    check_integer("number of nodes", m, 1)
    return _offsets(m, list(range(1, (int(neighbours) - 1) // 2 + 1)))


def erdos_renyi(m: int, rng: np.random.Generator, p: float = 0.1) -> sp.csr_matrix:
    """G(m, p): every unordered pair is an edge independently with probability ``p``."""
    check_integer("number of nodes", m, 1)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"erdos_renyi p must be in [0, 1], got {p!r}")
    iu, ju = np.triu_indices(m, k=1)
    keep = rng.random(iu.size) < p
    return _from_edges(m, iu[keep], ju[keep])


def watts_strogatz(m: int, rng: np.random.Generator, k: int = 8, p: float = 0.02) -> sp.csr_matrix:
    """Watts-Strogatz small world: ring lattice with ``k`` nearest neighbours (k even), each
    lattice edge ``(i, i+s)`` rewired with probability ``p`` to a uniformly drawn new endpoint
    (no self loops, no duplicate edges)."""
    check_integer("number of nodes", m, 2)
    if k % 2 or not 0 < k < m:
        raise ValueError(f"watts_strogatz k must be even and in (0, m), got k={k!r}, m={m}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"watts_strogatz p must be in [0, 1], got {p!r}")
    adj = [set() for _ in range(m)]
    for i in range(m):
        for s in range(1, k // 2 + 1):
            j = (i + s) % m
            adj[i].add(j)
            adj[j].add(i)
    for s in range(1, k // 2 + 1):
        for i in range(m):
            j = (i + s) % m
            if rng.random() < p and j in adj[i]:
                choices = [c for c in range(m) if c != i and c not in adj[i]]
                if not choices:
                    continue
                new = int(choices[rng.integers(len(choices))])
                adj[i].discard(j)
                adj[j].discard(i)
                adj[i].add(new)
                adj[new].add(i)
    rows = [i for i in range(m) for j in adj[i]]
    cols = [j for i in range(m) for j in adj[i]]
    return _from_edges(m, rows, cols, symmetric=False)


def random_k(m: int, rng: np.random.Generator | np.random.RandomState, neighbours: int = 10) -> sp.csr_matrix:
    """The DFedCata reference recipe: node ``i`` draws ``neighbours - 1`` indices from
    ``0..m-1`` without replacement (self dropped); edge ``{i<j}`` exists iff ``i`` picked ``j``.
    Mean degree ~ ``(neighbours - 1)``."""
    check_integer("number of nodes", m, 1)
    picks = min(int(neighbours) - 1, m)
    if picks <= 0:
        return sp.csr_matrix((m, m))
    rows, cols = [], []
    for i in range(m):
        idx = rng.choice(m, size=picks, replace=False)
        idx = idx[idx > i]  # keep the upper triangle of the pick matrix
        rows.append(np.full(idx.size, i))
        cols.append(idx)
    return _from_edges(m, np.concatenate(rows), np.concatenate(cols))


@dataclass(frozen=True)
class _Gen:
    fn: Callable[..., sp.csr_matrix]
    random: bool  # needs an rng
    time_varying: bool
    defaults: dict[str, Any] = field(default_factory=dict)
    legacy_seed: bool = False  # rng = np.random.RandomState(seed + t) (the official code's seeding)


TOPOLOGIES: dict[str, _Gen] = {
    "ring": _Gen(ring, False, False),
    "grid": _Gen(grid, False, False, {"rows": None}),
    "exponential": _Gen(exponential, False, False, {"symmetric": False}),
    "exponential_sym": _Gen(lambda m: exponential(m, symmetric=True), False, False),
    "full": _Gen(full, False, False),
    "circulant": _Gen(circulant, False, False, {"neighbours": 7}),
    "erdos_renyi": _Gen(erdos_renyi, True, True, {"p": 0.1}),
    "watts_strogatz": _Gen(watts_strogatz, True, False, {"k": 8, "p": 0.02}),
    "random": _Gen(random_k, True, True, {"neighbours": 10}),
    # random_k from a legacy RandomState exactly as the official DFedCata code draws it (one
    # choice(m, neighbours - 1, replace=False) per node, in node order)
    "random_code": _Gen(random_k, True, True, {"neighbours": 10}, legacy_seed=True),
}


def canonical_topology(name: str) -> str:
    """The registered topology name for ``name`` (aliases such as ``"er"``, ``"ws"`` resolved)."""
    if not isinstance(name, str):
        raise ValueError(f"topology must be a name, got {name!r}")
    key = name.replace("-", "_").lower()
    key = ALIASES.get(key, key)
    if key not in TOPOLOGIES and key != "fixed":
        raise ValueError(f"unknown topology {name!r}; choose one of {sorted(TOPOLOGIES)}")
    return key


def check_neighbours(name: str, neighbours: Any) -> int:
    """Validate the ``neighbours`` setting of topology ``name`` (an integer >= 2; odd for ``circulant``)."""
    if not is_int(neighbours) or neighbours < 2:
        raise ValueError(f"neighbours must be an integer >= 2 (the peer itself and at least one other), "
                         f"got neighbours={neighbours!r}")
    if name == "circulant" and neighbours % 2 == 0:
        raise ValueError(f"the circulant graph links i to i +- 1..h, so neighbours = 2h + 1 must be odd, "
                         f"got neighbours={neighbours!r}")
    return int(neighbours)


class Topology:
    """A (possibly time-varying) seeded peer graph on ``num_nodes`` clients.

    Parameters
    ----------
    name : str
        One of :data:`TOPOLOGIES` (see the module docstring).
    num_nodes : int
        Number of clients m (>= 1).
    seed : int (default: 0)
        Base seed; round ``t``'s graph uses ``round_rng(seed, t)`` (static random graphs
        such as Watts-Strogatz use ``t = 0`` for every round).
    time_varying : bool | None (default: None)
        Override whether the graph is redrawn each round (``None``: the generator's default,
        True for ``random`` and ``erdos_renyi``).
    **params
        Generator parameters (``neighbours`` for ``random``/``random_code``/``circulant``, ``p``
        for ``erdos_renyi``, ``k``/``p`` for ``watts_strogatz``, ``rows`` for ``grid``).
    """

    def __init__(self, name: str, num_nodes: int, seed: int = 0, time_varying: bool | None = None, **params: Any):
        key = canonical_topology(name)
        if key == "fixed":
            raise ValueError("a fixed topology is built with Topology.from_adjacency(adjacency)")
        check_integer("number of nodes", num_nodes, 1)
        gen = TOPOLOGIES[key]
        unknown = set(params) - set(gen.defaults)
        if unknown:
            raise ValueError(f"topology {key!r} does not take parameters {sorted(unknown)}; "
                             f"valid: {sorted(gen.defaults)}")
        self.name = key
        self.num_nodes = int(num_nodes)
        self.seed = int(seed)
        self.params = {**gen.defaults, **params}
        self.time_varying = gen.time_varying if time_varying is None else bool(time_varying)
        #: why the graph differs from the one requested (None: it does not)
        self.adjustment: str | None = None
        if "neighbours" in self.params:
            n = self.params["neighbours"] = check_neighbours(key, self.params["neighbours"])
            if n > self.num_nodes:
                self.adjustment = (f"neighbours={n} exceeds the {self.num_nodes} peers: topology {key!r} links every "
                                   "peer to every other (the complete graph)")
                log.warning("%s; set neighbours <= %s for a sparser graph", self.adjustment, self.num_nodes)
                gen, self.time_varying = TOPOLOGIES["full"], False
        self._gen = gen
        self._args = {k: v for k, v in self.params.items() if k in gen.defaults}
        self._cache: tuple[int, sp.csr_matrix] | None = None

    @classmethod
    def from_adjacency(cls, adjacency: Any) -> "Topology":
        """A static topology with the given 0/1 adjacency (square; ``A[i, j] = 1``: i receives from j)."""
        a = sp.csr_matrix(adjacency, dtype=np.float64)
        if a.shape[0] != a.shape[1] or a.shape[0] < 1:
            raise ValueError(f"adjacency must be a non-empty square matrix, got shape {a.shape}")
        a.setdiag(0)
        a.eliminate_zeros()
        a.data[:] = 1.0
        a.sort_indices()
        top = cls.__new__(cls)
        top.name, top.num_nodes, top.seed, top.params, top.time_varying = "fixed", int(a.shape[0]), 0, {}, False
        top.adjustment, top._gen, top._args, top._cache = None, None, {}, (0, a)
        return top

    def graph(self, t: int = 0) -> sp.csr_matrix:
        """Adjacency (csr, 0/1, no self loops) of round ``t``'s graph."""
        key = int(t) if self.time_varying else 0
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        gen = self._gen
        if gen.random:
            rng = np.random.RandomState(self.seed + key) if gen.legacy_seed else round_rng(self.seed, key)
            a = gen.fn(self.num_nodes, rng, **self._args)
        else:
            a = gen.fn(self.num_nodes, **self._args)
        self._cache = (key, a)
        return a

    def is_regular(self, t: int = 0) -> bool:
        a = self.graph(t)
        deg_in = np.asarray(a.sum(axis=1)).ravel()
        deg_out = np.asarray(a.sum(axis=0)).ravel()
        return bool(np.all(deg_in == deg_in[0]) and np.all(deg_out == deg_in[0]))

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, num_nodes={self.num_nodes}, seed={self.seed}, params={self.params})"
