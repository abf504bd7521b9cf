"""FedMUD: model update decomposition with block-wise Kronecker decomposition (BKD) and
aggregation-aware decomposition (AAD), plus the low-rank baselines FedLMT, FedPara and FedHM.

Li, Luo, Wang, Tang, Xu, Luo, Li, He, Li, "The Panaceas for Improving Low-Rank Decomposition in
Communication-Efficient Federated Learning", ICML 2025.

Modules: :mod:`.config` (validated settings), :mod:`.kron` (BKD layout), :mod:`.sizing` (layer
selection, factor sizes, ratio search), :mod:`.seeds` (shared factor seeds), :mod:`.delta` (the
parametrisation), :mod:`.wrap` (wrapping a model, reset/merge, wire schema), :mod:`.aggregation`,
:mod:`.schedule` (push rounds), :mod:`.baselines` (FedLMT / FedPara / FedHM helpers),
:mod:`.protocol` (what crosses the wire; the client half), :mod:`.server` (the server core),
:mod:`.strategy` / :mod:`.serverapp` (legacy / Message-API strategies), :mod:`.registration`.
The client pieces are in :mod:`flwr_strategies.clients.fedmud`.
"""

from .. import lazy_exports

__getattr__, _EXPORTS = lazy_exports(__name__, {
    ".aggregation": ("aggregation_weights", "weighted_mean"),
    ".baselines": ("BASELINE_SCHEMES", "svd_factors"),
    ".config": ("DEFAULT_INIT_SCALE", "METHOD_CONFIGS", "VARIANTS", "FedMUDConfig"),
    ".delta": ("UpdateDecomposition",),
    ".kron": ("batched_kron", "bkd_blocks", "bkd_delta", "bkd_side"),
    ".protocol": ("FedMUDStateError", "MUDClientCore", "plan_for_config"),
    ".schedule": ("is_push_round", "validate_reset_interval"),
    ".seeds": ("draw_factor", "factor_generator"),
    ".server": ("FedMUDServer",),
    ".sizing": ("LayerPlan", "ModelPlan", "UnreachableRatioError", "compressible_layers", "layer_view",
                "plan_at_rho", "plan_model", "smallest_reachable_ratio", "validate_ratio"),
    ".wrap": ("DecomposedModel",),
})
__all__ = sorted(_EXPORTS)
