"""Decentralized (peer-to-peer) FL core, shared by DFedCata and DO-ADP.

Public API
----------
Topologies (:mod:`.topology`)
    ``Topology(name, num_nodes, seed=0, time_varying=None, **params)`` with ``.graph(t)`` ->
    csr 0/1 adjacency of round t; names: ring, grid, exponential, exponential_sym, full,
    erdos_renyi, watts_strogatz, random (paper default, ``neighbours=10``, redrawn each round).
Mixing (:mod:`.mixing`)
    ``mixing_matrix(adj, weights="auto"|"uniform"|"metropolis_hastings", allow_row_stochastic=False,
    allow_disconnected=False)`` -> validated csr W; ``validate_mixing``, ``is_doubly_stochastic``,
    ``second_eigenvalue_modulus`` (psi), ``spectral_gap`` (1 - psi), ``is_connected``,
    ``mix(W, X, out=None)`` (sparse ``W @ X`` on a ``(m, d)`` table, in place allowed),
    ``restrict_to_alive(W, alive, policy="renormalize"|"self")``, ``MixingError``.
Tables (:mod:`.table`)
    ``ModelLayout.of(arrays)`` with ``flatten``/``unflatten``; ``ModelTable.replicate(arrays, m)``
    whose ``.data`` is the contiguous ``(m, d)`` array.
Consensus (:mod:`.consensus`)
    ``network_average(X)``, ``consensus_distance(X)`` = ``mean_i ||x_i - x_bar||^2``.
Strategy (:mod:`.strategy`)
    ``DecentralizedStrategy``: legacy Flower ``Strategy`` that emulates the peers; subclass
    hooks ``start_points``, ``fit_config``, ``update_state`` (see its module docstring).
"""

from .consensus import consensus_distance, network_average
from .mixing import (
    MixingError,
    is_connected,
    is_doubly_stochastic,
    mix,
    mixing_matrix,
    num_edges,
    restrict_to_alive,
    second_eigenvalue_modulus,
    spectral_gap,
    validate_mixing,
)
from .table import ModelLayout, ModelTable
from .topology import TOPOLOGIES, Topology, make_topology, round_rng

__all__ = [
    "Topology", "make_topology", "TOPOLOGIES", "round_rng",
    "MixingError", "mixing_matrix", "validate_mixing", "is_doubly_stochastic", "second_eigenvalue_modulus",
    "spectral_gap", "is_connected", "mix", "restrict_to_alive", "num_edges",
    "ModelLayout", "ModelTable", "network_average", "consensus_distance",
    "DecentralizedStrategy",
]


def __getattr__(name: str):  # lazy: importing flwr is slow and only the strategy needs it
    if name == "DecentralizedStrategy":
        from .strategy import DecentralizedStrategy

        return DecentralizedStrategy
    raise AttributeError(name)
