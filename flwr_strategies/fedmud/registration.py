"""Registry entries: FedMUD (six variants) and the low-rank baselines FedLMT, FedPara, FedHM.

Li et al., ICML 2025. ``fedmud`` is FedMUD+BKD+AAD with every setting overridable
(``--set decomp=mat pattern=ab`` etc.); the named variants fix ``decomp``/``pattern``.

Every default carries its source (``python -m simulations defaults fedmud``):

- every FedMUD variant: lr 0.01 (the released script of FedMUD+BKD+AAD, ``run/32-feddmu.sh``), 3 local
  epochs, batch 64, plain SGD without momentum or weight decay, 100 clients with 10 per round (paper
  Sec. 5.1). The paper tunes lr per method over {1.0, 0.3, 0.1, 0.03, 0.01} and reports only the full
  method's; the other variants keep the code's 0.01.
- FedLMT / FedPara / FedHM: the same epochs, batch, momentum, weight decay and participation (paper
  Sec. 5.1: "all methods share the FL setting"); their tuned lr and init scale are not reported, so lr
  0.03 (the released FedAvg script, ``run/31-fedavg.sh``) for FedLMT, and lr 0.1 for FedPara and FedHM,
  chosen from the paper's grid as the smallest value at which they learn within 5 rounds on the default
  dataset (docs/results/fedmud.md).
- participation on the default dataset (digits, 1,438 training examples) is a reduced setting: 10
  clients, all training every round, which keeps the paper's 10 clients per round; any other dataset
  gets the paper's 100 clients with fraction 0.1.
- aggregation weights: by example count, as Flower's FedAvg (a project choice: the official
  ``train/client.py`` weights by its number of batches); the paper's Eq. 4 is the uniform mean
  (``--set weighting=uniform``).
- initialisation scale ``a`` of ``Uniform(-a, a)``: a number that follows ``decomp`` unless set: 5.0 for
  BKD (the released script's ``uni_5.0``), 1.0 for the matrix forms (the paper tunes ``a`` over {0.01,
  ..., 10} and does not report it).

Ratio: the paper's whole-model 1/32 (``target_ratio``). The default dataset's MLP (digits,
64-200-200-10) cannot reach it: its uncompressed first and last layers alone are 27.5% of the model.
The registered methods therefore carry ``fallback_ratio=0.35`` (project choice): used only when
1/32 is unreachable, with a warning and the ratio reported every round. At 0.35 the one compressed
layer keeps about 10% of its weights and every variant and baseline learns within 5 rounds; at the
floor (0.275-0.30) FedPara's Hadamard factors are rank 2 and it does not learn. The paper's CNNs
reach 1/32 and never use the fallback. Set ``fallback_ratio=none`` to get an error instead.

The hyperparameters and their sources are the fields of the strategy classes' configs
(:class:`~flwr_strategies.fedmud.config.FedMUDConfig`, ``METHOD_CONFIGS``); the values above that
differ from a class's default are the method's named overrides (``python -m simulations defaults``).
"""

from __future__ import annotations

from typing import Any

from ..registry import MethodSpec, core_kwargs, register_method
from ..setup import ServerSetup
from .config import METHOD_CONFIGS, VARIANTS

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
STRATEGIES = {"fedlmt": "FedLMT", "fedpara": "FedPara", "fedhm": "FedHM"}
#: Whole-model ratio used where the paper's 1/32 is unreachable (the default digits MLP); see the module docstring.
DEFAULT_FALLBACK_RATIO = 0.35

_SEC51 = "paper: FedMUD Sec. 5.1 (Hyperparameters)"
_REDUCED = ("project: reduced setting for digits (1,438 training examples): at the paper's 100 clients each holds "
            "about 14 examples, a fraction of one batch of 64; 10 clients, all training, keep the paper's 10 clients "
            "per round (--num-clients 100 --fraction-fit 0.1 is the paper's)")
_SHARED = {
    "local_epochs": (3, f"{_SEC51}: 3 local epochs"),
    "batch_size": (64, f"{_SEC51}: batch 64"),
    "momentum": (0.0, "official code: run/32-feddmu.sh momentum=0 (Sec. 5.1: SGD)"),
    "weight_decay": (0.0, "official code: run/32-feddmu.sh l2=0"),
    "num_clients": ({"digits": (10, _REDUCED), "*": (100, f"{_SEC51}: 100 clients")}, _SEC51),
    "fraction_fit": ({"digits": (1.0, _REDUCED), "*": (0.1, f"{_SEC51}: 10 clients per round")}, _SEC51),
}
_LR_MUD = ("official code: run/32-feddmu.sh lrs=(0.01) for FedMUD+BKD+AAD; the paper tunes lr over "
           "{1.0, 0.3, 0.1, 0.03, 0.01} (Sec. 5.1) and reports no per-variant value")
_LR_PROJECT = ("project: the smallest rate of the paper's grid {1.0, 0.3, 0.1, 0.03, 0.01} (Sec. 5.1) at which it "
               "learns within 5 rounds on digits (docs/results/fedmud.md); the paper reports no tuned value")
TRAIN_DEFAULTS: dict[str, dict[str, tuple[Any, str]]] = {
    **{name: {"lr": (0.01, _LR_MUD), **_SHARED} for name in ("fedmud", *VARIANTS)},
    "fedlmt": {"lr": (0.03, "official code: run/31-fedavg.sh lrs=(0.03), the released FedAvg rate (FedLMT's tuned "
                            "rate is not reported)"), **_SHARED},
    "fedpara": {"lr": (0.1, _LR_PROJECT), **_SHARED},
    "fedhm": {"lr": (0.1, _LR_PROJECT), **_SHARED},
}

_DECOMP = {
    "kron": "paper: Sec. 3.2 (block-wise Kronecker decomposition, BKD)",
    "mat": "paper: Sec. 3.1 (matrix low-rank factors of the model update)",
}
_PATTERN = {
    "aad": "paper: Sec. 3.3 (aggregation-aware decomposition, AAD)",
    "ab": "paper: Sec. 3.1, Eq. 3 (both factors trained)",
    "freeze": "paper: Sec. 5.3, Table 2 (the '+F' variants: one factor frozen)",
}
#: The initialisation scale the command line runs where the class leaves it to follow ``decomp``.
_INIT_SCALE = ("params.decomp", {
    "kron": (5.0, "official code: run/32-feddmu.sh init uni_5.0 (BKD); the paper tunes a over "
                  "{0.01, 0.05, 0.1, 0.5, 1, 5, 10} (Sec. 5.1)"),
    "mat": (1.0, "project: the paper tunes a over {0.01, 0.05, 0.1, 0.5, 1, 5, 10} (Sec. 5.1) and does not report "
                 "it; 1.0 is where every matrix variant learns at lr 0.01 on digits (0.1 stays at chance)"),
    "hadamard": (1.0, "project: the paper tunes a (Sec. 5.1) and does not report FedPara's"),
})
_FALLBACK = (DEFAULT_FALLBACK_RATIO, "project: digits' MLP cannot reach 1/32 (its dense first and last layers are "
                                     "27.5% of it); at 0.35 every method learns within 5 rounds; used only when the "
                                     "target is unreachable (fallback_ratio=none: an error instead)")


def _overrides(name: str) -> dict[str, Any]:
    """The values the command line runs instead of the class's: the variant's structure, the fallback
    ratio of the default dataset, and the initialisation scale that follows ``decomp``."""
    out: dict[str, Any] = {"fallback_ratio": _FALLBACK}
    if name in VARIANTS:
        decomp, pattern = VARIANTS[name]
        out.update(decomp=(decomp, _DECOMP[decomp]), pattern=(pattern, _PATTERN[pattern]))
    if METHOD_CONFIGS[name].init_scale is None:
        out["init_scale"] = _INIT_SCALE
    return out


def _model(setup: ServerSetup, params: dict) -> dict[str, Any]:
    """The core's arguments: the task's plain model (its layers are decomposed) and the experiment's sampling."""
    return {"model": setup.model_fn(), **core_kwargs(setup)}


for _name in SUMMARIES:
    register_method(MethodSpec(
        name=_name, summary=SUMMARIES[_name], paper=CITES.get(_name, PAPER),
        strategy="flwr_strategies.fedmud.strategy:" + STRATEGIES.get(_name, "FedMUD"), overrides=_overrides(_name),
        core_arguments=_model, client="flwr_strategies.clients.fedmud:FedMUDClient",
        train_defaults=TRAIN_DEFAULTS[_name],
    ))
