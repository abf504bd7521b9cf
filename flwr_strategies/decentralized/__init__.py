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
    ``mix_row(W, X, i, out=None)`` (row ``i`` of ``W @ X``, same arithmetic),
    ``restrict_to_alive(W, alive, policy="renormalize"|"self")``, ``MixingError``.
Tables (:mod:`.table`)
    ``ModelLayout.of(arrays)`` with ``flatten``/``unflatten``; ``ModelTable.replicate(arrays, m)``
    whose ``.data`` is the contiguous ``(m, d)`` array.
Consensus (:mod:`.consensus`)
    ``network_average(X)``, ``consensus_distance(X)`` = ``mean_i ||x_i - x_bar||^2``.
Settings (:mod:`.config`)
    ``GraphConfig``: topology, neighbours, weights, failure policy, peer evaluation (validated).
Core (:mod:`.server`)
    ``DecentralizedCore``: the framework-neutral server core (NumPy in/out) at the memory floor;
    methods subclass it (hooks ``start_point``, ``commit``, ``client_config``, ``method_tables``).
Adapters
    The generic Flower adapters (:mod:`flwr_strategies.adapters`) drive any core; the methods'
    strategies are declarations in their own folders (``flwr_strategies.dfedcata.strategy``...).
"""

from .consensus import consensus_distance, network_average
from .mixing import (
    MixingError,
    is_connected,
    is_doubly_stochastic,
    mix,
    mix_row,
    mixing_matrix,
    num_edges,
    restrict_to_alive,
    second_eigenvalue_modulus,
    spectral_gap,
    validate_mixing,
)
from .config import GraphConfig
from .table import ModelLayout, ModelTable
from .topology import TOPOLOGIES, Topology, make_topology, round_rng

__all__ = [
    "Topology", "make_topology", "TOPOLOGIES", "round_rng",
    "MixingError", "mixing_matrix", "validate_mixing", "is_doubly_stochastic", "second_eigenvalue_modulus",
    "spectral_gap", "is_connected", "mix", "mix_row", "restrict_to_alive", "num_edges",
    "ModelLayout", "ModelTable", "network_average", "consensus_distance", "GraphConfig",
    "DecentralizedCore",
]

_LAZY = {
    "DecentralizedCore": ".server",
}


def __getattr__(name: str):  # lazy: importing flwr is slow and only the adapters need it
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(name)
