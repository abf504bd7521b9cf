"""Registry entries: FedMUD (six variants) and the low-rank baselines FedLMT, FedPara, FedHM.

Li et al., ICML 2025 (spec 004). ``fedmud`` is FedMUD+BKD+AAD with every option settable
(``--set decomp=mat pattern=ab`` etc.); the named variants fix ``decomp``/``pattern``.
"""

from __future__ import annotations

from typing import Any

from flwr_strategies.clients.fedmud import FedMUDClient

from ..registry import MethodSpec, register_method
from ..setup import ClientSetup, ServerSetup
from .options import METHOD_OPTIONS, MUDOptions
from .strategy import FedMUDStrategy

PAPER = "Li et al., The Panaceas for Improving Low-Rank Decomposition in Communication-Efficient FL, ICML 2025"
CITES = {
    "fedlmt": "Liu et al., ICML 2024 (FedLMT); as defined in " + PAPER,
    "fedpara": "Hyeon-Woo et al., ICLR 2022 (FedPara); as defined in " + PAPER,
    "fedhm": "Yao et al., 2021 (FedHM); as defined in " + PAPER,
}
SUMMARIES = {
    "fedmud": "FedMUD+BKD+AAD (default; any variant via --set decomp=, pattern=): low-rank update factors only on the wire",
    "fedmud_mat": "FedMUD: matrix low-rank model update U@V, reset every s rounds",
    "fedmud_f": "FedMUD+F: U~@V with U~ frozen from a shared seed",
    "fedmud_aad": "FedMUD+AAD: U~@V1 + U2@V~, exactly aggregatable",
    "fedmud_bkd": "FedMUD+BKD: block-wise Kronecker update",
    "fedmud_bkd_f": "FedMUD+BKD+F: Kronecker blocks with a frozen seeded factor",
    "fedmud_bkd_aad": "FedMUD+BKD+AAD: Kronecker blocks, aggregation-aware",
    "fedlmt": "FedLMT: pre-decomposed weights U@V, factors averaged directly",
    "fedpara": "FedPara: low-rank Hadamard weights (X1@Y1)*(X2@Y2)",
    "fedhm": "FedHM: SVD of the full global model each round, average of recovered products",
}


def _defaults(opts: MUDOptions) -> dict[str, Any]:
    return {
        "decomp": opts.decomp,
        "pattern": opts.pattern,
        "target_ratio": float(opts.target_ratio),
        "init_scale": float(opts.init_scale or 0.0),  # 0 = variant default (kron 5.0, mat 0.1)
        "init_dist": opts.init_dist,
        "reset_interval": int(opts.reset_interval or 0),  # 0 = never reset
        "skip_first": int(opts.skip_first),
        "skip_last": int(opts.skip_last),
        "weighting": opts.weighting,
        "base_init": opts.base_init,
        "base_std": float(opts.base_std),
        "strict_ratio": bool(opts.strict_ratio),
    }


def options_from_params(name: str, params: dict) -> MUDOptions:
    """The :class:`MUDOptions` of method ``name`` with ``params`` applied (validated)."""
    base = METHOD_OPTIONS[name]
    p = dict(params)
    if int(p.get("reset_interval", 1)) < 0:
        raise ValueError(f"reset_interval must be an integer >= 1 (or 0 for never), got {p['reset_interval']}")
    over = {
        "decomp": p.get("decomp", base.decomp),
        "pattern": p.get("pattern", base.pattern),
        "target_ratio": float(p.get("target_ratio", base.target_ratio)),
        "init_scale": (float(p["init_scale"]) or None) if "init_scale" in p else base.init_scale,
        "init_dist": p.get("init_dist", base.init_dist),
        "reset_interval": (int(p["reset_interval"]) or None) if "reset_interval" in p else base.reset_interval,
        "skip_first": int(p.get("skip_first", base.skip_first)),
        "skip_last": int(p.get("skip_last", base.skip_last)),
        "weighting": p.get("weighting", base.weighting),
        "base_init": p.get("base_init", base.base_init),
        "base_std": float(p.get("base_std", base.base_std)),
        "strict_ratio": bool(p.get("strict_ratio", base.strict_ratio)),
    }
    return base.with_overrides(over)


def _builders(name: str):
    def build_strategy(setup: ServerSetup, params: dict) -> FedMUDStrategy:
        return FedMUDStrategy(
            model=setup.model_fn(), initial_parameters=setup.initial_parameters,
            options=options_from_params(name, params), evaluate_fn=setup.evaluate_fn,
            on_fit_config_fn=setup.fit_config, fraction_fit=setup.fraction_fit,
            min_fit_clients=setup.clients_per_round, min_available_clients=setup.num_clients, seed=setup.seed,
        )

    def build_client(setup: ClientSetup, params: dict) -> FedMUDClient:
        return FedMUDClient(setup, params, options_from_params(name, params))

    return build_strategy, build_client


for _name in SUMMARIES:
    _s, _c = _builders(_name)
    register_method(MethodSpec(
        name=_name, summary=SUMMARIES[_name], paper=CITES.get(_name, PAPER),
        defaults=_defaults(METHOD_OPTIONS[_name]), build_strategy=_s, build_client=_c,
    ))
