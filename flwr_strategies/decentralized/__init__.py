"""Decentralized (peer-to-peer) FL: one core for every peer-graph method (DFedCata, DFedAvg(M),
DFedSAM, D-PSGD, DO-ADP, D-mSGD, DPDO, DP-DDA, CPGT).

Public API
----------
Topologies (:mod:`.topology`)
    ``Topology(name, num_nodes, seed=0, time_varying=None, **params)`` with ``.graph(t)`` ->
    csr 0/1 adjacency of round t; names: ring, grid, exponential, exponential_sym, full, circulant
    (DO-ADP paper, ``neighbours=7``), erdos_renyi, watts_strogatz, random (DFedCata paper,
    ``neighbours=10``, redrawn each round); ``Topology.from_adjacency(A)`` for a given graph.
Mixing (:mod:`.mixing`)
    ``mixing_matrix(adj, weights="auto"|"uniform"|"metropolis_hastings", allow_row_stochastic=False,
    allow_disconnected=False)`` -> validated csr W; ``validate_mixing``, ``is_doubly_stochastic``,
    ``second_eigenvalue_modulus`` (psi), ``spectral_gap`` (1 - psi), ``is_connected``,
    ``mix(W, X, out=None)`` (sparse ``W @ X`` on a ``(m, d)`` table, in place allowed),
    ``mix_row(W, X, i, out=None)`` (row ``i`` of ``W @ X``, same arithmetic),
    ``restrict_to_alive(W, alive, policy="renormalize"|"self")``, ``MixingError``.
Tables (:mod:`.table`)
    ``ModelLayout.of(arrays)`` with ``flatten``/``unflatten``; ``ModelTable.replicate(arrays, m)``
    whose ``.data`` is the contiguous ``(m, d)`` array.
Consensus (:mod:`.consensus`)
    ``network_average(X)``, ``consensus_distance(X)`` = ``mean_i ||x_i - x_bar||^2``.
Settings (:mod:`.config`)
    ``GraphConfig``: topology, neighbours, weights, failure policy, peer evaluation (validated).
Cores (:mod:`.server`)
    ``DecentralizedCore``: the framework-neutral server core (NumPy in/out) of every peer-graph
    method: graph, mixing, spectral gap, participation and failures (``PeerFailure``).
    ``GossipCore``: the model-gossip family at the memory floor (DFedAvg; DFedCata and D-PSGD
    subclass it). DO-ADP's family is :class:`flwr_strategies.doadp.peer.PublicTableCore`.
Adapters
    The generic Flower adapters (:mod:`flwr_strategies.adapters`) drive any core; the methods'
    strategies are declarations in their own folders (``flwr_strategies.dfedcata.strategy``...).
"""

from .. import lazy_exports

__getattr__, _EXPORTS = lazy_exports(__name__, {
    ".consensus": ("consensus_distance", "network_average"),
    ".mixing": ("MixingError", "is_connected", "is_doubly_stochastic", "mix", "mix_row", "mixing_matrix",
                "restrict_to_alive", "second_eigenvalue_modulus", "spectral_gap", "validate_mixing"),
    ".config": ("GraphConfig",),
    ".table": ("ModelLayout", "ModelTable"),
    ".topology": ("TOPOLOGIES", "Topology", "canonical_topology", "round_rng"),
    ".server": ("DecentralizedCore", "GossipCore", "PeerFailure"),
})
__all__ = sorted(_EXPORTS)
