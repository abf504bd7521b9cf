"""Decentralized (peer-to-peer) FL: one core for every peer-graph method (DFedCata, DFedAvg(M),
DFedSAM, D-PSGD, DO-ADP, D-mSGD, DPDO, DP-DDA, CPGT).

The seeded peer graphs (:mod:`.topology`), the validated mixing matrices and the sparse gossip step
(:mod:`.mixing`), the contiguous ``(m, d)`` table of peer models (:mod:`.table`), the network
average and consensus distance (:mod:`.consensus`), the graph settings every method shares
(:mod:`.config`) and the framework-neutral cores (:mod:`.server`: ``DecentralizedCore``,
``GossipCore``; DO-ADP's family is :class:`flwr_strategies.doadp.peer.PublicTableCore`). The
generic Flower adapters (:mod:`flwr_strategies.adapters`) drive any core; the methods' strategies
are declarations in their own folders (``flwr_strategies.dfedcata.strategy``...).
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
