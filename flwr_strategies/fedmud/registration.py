"""Registry entries: FedMUD (six variants) and the low-rank baselines FedLMT, FedPara, FedHM.

Li et al., ICML 2025 (spec 004). ``fedmud`` is FedMUD+BKD+AAD with every setting overridable
(``--set decomp=mat pattern=ab`` etc.); the named variants fix ``decomp``/``pattern``.

Training defaults (``train_defaults``, with where each value comes from):

- every FedMUD variant: lr 0.01 (the released script of FedMUD+BKD+AAD, official code), 3 local
  epochs, batch 64, plain SGD without momentum or weight decay, 10% of the clients per round
  (paper Section 5.1). The paper tunes lr per method over {1.0, 0.3, 0.1, 0.03, 0.01} and reports
  only the full method's; the other variants keep the code's 0.01.
- FedLMT / FedPara / FedHM: the same epochs, batch, momentum, weight decay and fraction (paper:
  "all methods share the FL setting"); their tuned lr and init scale are not reported, so lr 0.03
  (the official code's FedAvg lr) for FedLMT, and lr 0.1 for FedPara and FedHM, chosen from the
  paper's grid as the smallest value at which they learn within 5 rounds on the default dataset
  (measured in docs/results/fedmud.md).

Ratio: the paper's whole-model 1/32 (``target_ratio``). The default dataset's MLP (digits,
64-200-200-10) cannot reach it: its uncompressed first and last layers alone are 27.5% of the model.
The registered methods therefore carry ``fallback_ratio=0.35`` (project choice): used only when
1/32 is unreachable, with a warning and the ratio reported every round. At 0.35 the one compressed
layer keeps about 10% of its weights and every variant and baseline learns within 5 rounds; at the
floor (0.275-0.30) FedPara's Hadamard factors are rank 2 and it does not learn. The paper's CNNs
reach 1/32 and never use the fallback. Set ``fallback_ratio=0`` to get an error instead.
"""

from __future__ import annotations

from typing import Any

from ..registry import MethodSpec, register_method
from ..setup import ServerSetup
from .config import METHOD_CONFIGS, VARIANTS, FedMUDConfig
from .server import FedMUDServer

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
#: Whole-model ratio used where the paper's 1/32 is unreachable (the default digits MLP); see the module docstring.
DEFAULT_FALLBACK_RATIO = 0.35

_SHARED = {
    "local_epochs": (3, "paper"),
    "batch_size": (64, "paper"),
    "momentum": (0.0, "paper"),
    "weight_decay": (0.0, "paper"),
    "fraction_fit": (0.1, "paper"),
}
TRAIN_DEFAULTS: dict[str, dict[str, tuple[Any, str]]] = {
    **{name: {"lr": (0.01, "official code"), **_SHARED} for name in ("fedmud", *VARIANTS)},
    "fedlmt": {"lr": (0.03, "official code"), **_SHARED},
    "fedpara": {"lr": (0.1, "project"), **_SHARED},
    "fedhm": {"lr": (0.1, "project"), **_SHARED},
}


def _defaults(cfg: FedMUDConfig) -> dict[str, Any]:
    return {
        "decomp": cfg.decomp,
        "pattern": cfg.pattern,
        "target_ratio": float(cfg.target_ratio),
        "fallback_ratio": DEFAULT_FALLBACK_RATIO,  # 0 = none
        "init_scale": float(cfg.init_scale or 0.0),  # 0 = variant default (kron 5.0, mat 1.0)
        "init_dist": cfg.init_dist,
        "reset_interval": int(cfg.reset_interval or 0),  # 0 = never reset
        "skip_first": int(cfg.skip_first),
        "skip_last": int(cfg.skip_last),
        "weighting": cfg.weighting,
        "base_init": cfg.base_init,
        "base_std": float(cfg.base_std),
        "strict_ratio": bool(cfg.strict_ratio),
    }


def config_from_params(name: str, params: dict) -> FedMUDConfig:
    """The :class:`FedMUDConfig` of method ``name`` with registry ``params`` applied (validated).

    Registry conventions: ``init_scale=0`` means the variant default, ``reset_interval=0`` never
    resets, ``fallback_ratio=0`` means no fallback.
    """
    base = METHOD_CONFIGS[name]
    p = dict(params)
    over: dict[str, Any] = {}
    for key in ("decomp", "pattern", "init_dist", "weighting", "base_init", "target_ratio", "base_std",
                "skip_first", "skip_last", "strict_ratio"):
        if key in p:
            over[key] = p[key]
    if "init_scale" in p:
        over["init_scale"] = None if p["init_scale"] == 0 else p["init_scale"]
    if "fallback_ratio" in p:
        over["fallback_ratio"] = None if p["fallback_ratio"] == 0 else p["fallback_ratio"]
    if "reset_interval" in p:
        s = p["reset_interval"]
        if isinstance(s, bool) or not isinstance(s, (int, float)) or s != s or s < 0 or int(s) != s:
            raise ValueError(f"reset_interval must be an integer >= 1, or 0 for never, got {s!r}")
        over["reset_interval"] = None if s == 0 else int(s)
    return base.with_overrides(over)


def core_kwargs(setup: ServerSetup) -> dict[str, Any]:
    """:class:`~flwr_strategies.core.server.ServerCore` arguments from the experiment."""
    return {
        "num_partitions": setup.num_clients,
        "fraction_train": setup.fraction_fit,
        "min_train": setup.clients_per_round,
        "seed": setup.seed,
        "on_train_config": setup.fit_config,
    }


def _builder(name: str):
    def build_core(setup: ServerSetup, params: dict) -> FedMUDServer:
        return FedMUDServer(setup.initial_parameters, model=setup.model_fn(), config=config_from_params(name, params),
                            **core_kwargs(setup))

    return build_core


for _name in SUMMARIES:
    register_method(MethodSpec(
        name=_name, summary=SUMMARIES[_name], paper=CITES.get(_name, PAPER),
        defaults=_defaults(METHOD_CONFIGS[_name]), build_core=_builder(_name),
        client="flwr_strategies.clients.fedmud:build_fedmud_client",
        train_defaults=TRAIN_DEFAULTS[_name],
    ))
