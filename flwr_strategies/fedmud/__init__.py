"""FedMUD: model update decomposition with block-wise Kronecker decomposition (BKD) and
aggregation-aware decomposition (AAD).

Li, Luo, Wang, Tang, Xu, Luo, Li, He, Li, "The Panaceas for Improving Low-Rank Decomposition in
Communication-Efficient Federated Learning", ICML 2025. Spec: ``specs/004_fedmud.md``.

Modules: :mod:`.kron` (BKD layout), :mod:`.sizing` (layer selection, factor sizes, ratio search),
:mod:`.seeds` (shared factor seeds), :mod:`.delta` (the parametrisation), :mod:`.wrap`
(wrapping a model, reset/merge, wire schema), :mod:`.aggregation`, :mod:`.schedule` (push rounds),
:mod:`.baselines` (FedLMT / FedPara / FedHM helpers).
"""

from .aggregation import aggregation_weights, weighted_mean
from .baselines import BASELINE_SCHEMES, svd_factors
from .delta import UpdateDecomposition
from .options import METHOD_OPTIONS, MUDOptions
from .protocol import MUDClientCore, MUDServer
from .kron import batched_kron, bkd_blocks, bkd_delta, bkd_side
from .schedule import is_push_round, validate_reset_interval
from .seeds import draw_factor, factor_generator
from .sizing import (
    LayerPlan,
    ModelPlan,
    UnreachableRatioError,
    compressible_layers,
    layer_view,
    plan_at_rho,
    plan_model,
    smallest_reachable_ratio,
    validate_ratio,
)
from .wrap import DecomposedModel, default_init_scale

VARIANTS = {
    "fedmud": ("mat", "ab"),
    "fedmud_f": ("mat", "freeze"),
    "fedmud_aad": ("mat", "aad"),
    "fedmud_bkd": ("kron", "ab"),
    "fedmud_bkd_f": ("kron", "freeze"),
    "fedmud_bkd_aad": ("kron", "aad"),
}

__all__ = [
    "VARIANTS", "METHOD_OPTIONS", "MUDOptions", "MUDClientCore", "MUDServer", "BASELINE_SCHEMES", "DecomposedModel", "LayerPlan", "ModelPlan", "UnreachableRatioError",
    "UpdateDecomposition", "aggregation_weights", "batched_kron", "bkd_blocks", "bkd_delta", "bkd_side",
    "compressible_layers", "default_init_scale", "draw_factor", "factor_generator", "is_push_round",
    "layer_view", "plan_at_rho", "plan_model", "smallest_reachable_ratio", "svd_factors",
    "validate_ratio", "validate_reset_interval", "weighted_mean",
]
