"""Hyperparameters of FedMUD and of the low-rank baselines built on the same machinery.

Li, Luo, Wang, Tang, Xu, Luo, Li, He, Li, "The Panaceas for Improving Low-Rank Decomposition in
Communication-Efficient Federated Learning", ICML 2025 (Sec. 3, Eq. 3-9; Sec. 5.1).

:class:`FedMUDConfig` is frozen and validated on construction: an impossible value raises a
``ValueError`` naming the setting and the value, before any training. The same config is sent to the
clients in every training message (:meth:`FedMUDConfig.to_wire`), so a client never needs to be
configured separately and cannot disagree with the server.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Mapping

from ..core.aggregation import WEIGHTINGS
from ..core.declare import setting, sourced
from ..core.validation import check_choice, check_flag, check_integer, check_number
from .schedule import validate_reset_interval

__all__ = ["FedMUDConfig", "METHOD_CONFIGS", "BASE_INITS", "VARIANTS",
           "DEFAULT_INIT_SCALE"]

BASE_INITS = ("normal", "kaiming", "given")
#: Update decompositions, update patterns and factor distributions (:class:`FedMUDConfig`).
DECOMPS = ("mat", "kron", "hadamard")
PATTERNS = ("ab", "freeze", "aad")
INIT_DISTS = ("uniform", "normal")

#: ``init_scale`` used when it is left at None, per ``decomp``: 5.0 for BKD (the released script's
#: ``uni_5.0``, official code); 1.0 for the matrix forms (the paper tunes ``a`` over
#: {0.01, 0.05, 0.1, 0.5, 1, 5, 10} and does not report the result; 1.0 is the value from that grid
#: at which every matrix variant learns at the code's lr 0.01, measured in docs/results/fedmud.md);
#: 1.0 for FedPara's Hadamard form.
DEFAULT_INIT_SCALE = {"kron": 5.0, "mat": 1.0, "hadamard": 1.0}

# the six FedMUD variants of the paper: method name -> (decomp, pattern)
VARIANTS = {
    "fedmud_mat": ("mat", "ab"),
    "fedmud_f": ("mat", "freeze"),
    "fedmud_aad": ("mat", "aad"),
    "fedmud_bkd": ("kron", "ab"),
    "fedmud_bkd_f": ("kron", "freeze"),
    "fedmud_bkd_aad": ("kron", "aad"),
}


def validate_ratio(ratio: float, name: str = "target_ratio") -> float:
    """Return ``ratio`` as float if it lies in (0, 1], else raise ``ValueError``."""
    try:
        value = float(ratio)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a number in (0, 1], got {ratio!r}") from exc
    if not (0.0 < value <= 1.0) or math.isnan(value):
        raise ValueError(f"{name} must be in (0, 1], got {ratio!r}")
    return value


@dataclass(frozen=True)
class FedMUDConfig:
    """Settings of FedMUD (six variants) and of FedLMT / FedPara / FedHM.

    Defaults are FedMUD+BKD+AAD as in the paper's main tables and the released script: Kronecker
    blocks, aggregation-aware decoupling, whole-model ratio 1/32, reset every round, init
    ``Uniform(-5, 5)``.
    """

    decomp: str = setting("kron", "kron, mat, hadamard",
                          "paper: FedMUD Sec. 3.2 (block-wise Kronecker decomposition, BKD)",
                          "Block-wise Kronecker factors (``kron``, BKD, paper Section 4.2), matrix low-rank factors "
                          "(``mat``, plain MUD), or FedPara's Hadamard form (``hadamard``, baseline only).")
    pattern: str = setting("aad", "aad, ab, freeze", "paper: FedMUD Sec. 3.3 (aggregation-aware decomposition, AAD)",
                           "Update structure: aggregation-aware decoupling ``U~V1 + U2V~`` (``aad``, Section 4.3), "
                           "the plain product ``UV`` (``ab``, Eq. 3), or a frozen left factor ``U~V`` (``freeze``, "
                           "the \"+F\" ablation, Table 2).")
    target_ratio: float = setting(1 / 32, "(0, 1]", "paper: FedMUD Sec. 5.1 (Hyperparameters): ratio 1/32 for all "
                                                    "methods",
                                  "Whole-model communication ratio ``P_payload / P_dense`` met by the reference "
                                  "code's search over the per-layer ratio (within +0.001).")
    fallback_ratio: float | None = setting(None, "(0, 1] or None",
                                           "project: None = no fallback; an unreachable ratio is an error (see "
                                           "strict_ratio)",
                                           "Whole-model ratio used instead when ``target_ratio`` is below the "
                                           "smallest ratio the model can reach (its uncompressed first/last layers, "
                                           "normalisation parameters and biases alone exceed it). The run then logs "
                                           "a warning and reports the ratio it used in every round's ``ratio`` "
                                           "metric. None: no fallback (see ``strict_ratio``). The registry's methods"
                                           " set 0.35 for the default ``digits`` MLP (floor 0.275); the paper's CNNs"
                                           " reach 1/32 and never use it.")
    init_scale: float | str | None = setting(None, "> 0, 'auto' or None",
                                             "project: None = follows decomp (DEFAULT_INIT_SCALE: 5.0 for BKD, the "
                                             "released script's uni_5.0; 1.0 otherwise)",
                                             "``a`` of the random factors' ``Uniform(-a, a)`` (std of ``Normal(0, "
                                             "a)``); None takes :data:`DEFAULT_INIT_SCALE` for ``decomp``. The paper"
                                             " tunes it over {0.01, 0.05, 0.1, 0.5, 1, 5, 10} together with the "
                                             "learning rate. ``auto`` sizes each layer's factors from its shape so "
                                             "that the learning rate of a plain model keeps its meaning "
                                             "(:func:`~flwr_strategies.fedmud.delta.auto_variances`): the update's "
                                             "SGD step equals a plain SGD step in expectation, and FedLMT / FedPara "
                                             "products start at PyTorch's default weight scale. For a user's own "
                                             "training loop and optimizer.")
    init_dist: str = setting("uniform", "uniform, normal", "paper: FedMUD Sec. 5.1 (Hyperparameters): factors drawn "
                                                           "from U(-a, a)",
                             "Distribution of the random factors: ``Uniform(-a, a)`` or ``Normal(0, a)``.")
    reset_interval: int | None = setting(1, ">= 1, or None (never)",
                                         "paper: FedMUD Sec. 5.4, Fig. 3 (reset every round, s = 1; dmu_interval=1 "
                                         "in run/*.sh)",
                                         "``s``: merge the update into ``W_base`` and re-initialise the factors "
                                         "every ``s`` rounds (round ``t`` does it iff ``t >= 2`` and ``(t-1) % s == "
                                         "0``). None never resets (FedLMT, FedPara, FedHM).")
    skip_first: int = setting(1, ">= 0", "paper: FedMUD Sec. 5.1 (the first and last layers are not compressed; "
                                         "skip_front_back=1-1 in run/*.sh)",
                              "Linear/conv layers (registration order) kept dense at the front.")
    skip_last: int = setting(1, ">= 0", "paper: FedMUD Sec. 5.1 (the first and last layers are not compressed; "
                                        "skip_front_back=1-1 in run/*.sh)",
                             "Linear/conv layers (registration order) kept dense at the back.")
    weighting: str = setting("num_examples", "num_examples, uniform",
                             "project: weights by example count, as Flower's FedAvg; the official train/client.py "
                             "weights by its number of batches and the paper's Eq. 4 is uniform (weighting=uniform)",
                             "Aggregation weights; the paper's Eq. 4 is uniform, the code weights by local data "
                             "size.")
    zero_base: bool = setting(False, "bool", "paper: FedMUD Sec. 3.1, Eq. 3 (the factors parametrise the update of "
                                             "W_base)",
                              "``W_base = 0``: the factors parametrise the weight itself (FedLMT, FedPara, FedHM). "
                              "Needs ``reset_interval=None``.")
    random_right: bool = setting(False, "bool", "paper: FedMUD Sec. 3.1, Eq. 3 (the update starts at zero)",
                                 "Pattern ``ab`` only: draw the right factor at random too (FedLMT / FedHM init). "
                                 "Needs ``reset_interval=None`` (a reset would no longer keep the model unchanged).")
    base_init: str = setting("normal", "normal, kaiming, given",
                             "official code: decompose/models.py initialises weights from Normal(0, 0.01)",
                             "Initial ``W_base`` of the compressed layers: ``normal`` = ``Normal(0, base_std)`` (the"
                             " reference code's init, ``decompose/models.py``) and ``kaiming`` = PyTorch's default "
                             "``Uniform(+-1/sqrt(fan_in))`` are regenerated from a shared seed by every party, so "
                             "they are never sent; ``given`` keeps the initial weights you pass (each client then "
                             "receives the full base once, counted as traffic).")
    base_std: float = setting(0.01, "> 0, finite", "official code: decompose/models.py nn.init.normal_(std=0.01)",
                              "Standard deviation of ``base_init=\"normal\"``.")
    strict_ratio: bool = setting(True, "bool", "project: a ratio the model cannot reach is an error, never silently "
                                               "raised (the official code accepts its floor: strict_ratio=False)",
                                 "When ``target_ratio`` (and ``fallback_ratio``) cannot be reached: True raises an "
                                 "error that states the smallest reachable ratio; False accepts that floor, as the "
                                 "reference code does (SVHN's CNN-4 at 1/32 -> 0.0353).")
    fedhm: bool = setting(False, "bool", "project: the server-side SVD is FedHM's alone (the FedHM baseline)",
                          "FedHM: the server keeps full weights, factorises them by truncated SVD every round and "
                          "averages the recovered products ``U_i V_i``. Needs ``decomp=\"mat\"``, "
                          "``pattern=\"ab\"``, ``zero_base=True``, ``reset_interval=None``.")

    def __post_init__(self) -> None:
        check_choice("decomp", self.decomp, DECOMPS)
        check_choice("pattern", self.pattern, PATTERNS)
        if self.decomp == "hadamard" and self.pattern != "ab":
            raise ValueError(f"decomp='hadamard' (FedPara) supports only pattern='ab', got pattern={self.pattern!r}")
        object.__setattr__(self, "target_ratio", validate_ratio(self.target_ratio, "target_ratio"))
        if self.fallback_ratio is not None:
            object.__setattr__(self, "fallback_ratio", validate_ratio(self.fallback_ratio, "fallback_ratio"))
        if self.init_scale is not None and self.init_scale != "auto":
            object.__setattr__(self, "init_scale",
                               check_number("init_scale", self.init_scale, "a finite number > 0", lambda v: v > 0))
        check_choice("init_dist", self.init_dist, INIT_DISTS)
        if self.reset_interval is not None:
            try:
                object.__setattr__(self, "reset_interval", validate_reset_interval(self.reset_interval))
            except (TypeError, ValueError):
                raise ValueError(f"reset_interval must be an integer >= 1 or None (never reset), "
                                 f"got {self.reset_interval!r}") from None
        object.__setattr__(self, "skip_first", check_integer("skip_first", self.skip_first))
        object.__setattr__(self, "skip_last", check_integer("skip_last", self.skip_last))
        check_choice("weighting", self.weighting, WEIGHTINGS)
        check_choice("base_init", self.base_init, BASE_INITS)
        object.__setattr__(self, "base_std",
                           check_number("base_std", self.base_std, "a finite number > 0", lambda v: v > 0))
        for name in ("zero_base", "random_right", "strict_ratio", "fedhm"):
            check_flag(name, getattr(self, name))
        if self.random_right and self.pattern != "ab":
            raise ValueError(f"random_right=True needs pattern='ab', got pattern={self.pattern!r}")
        never_reset = {"zero_base": self.zero_base, "random_right": self.random_right,
                       "decomp='hadamard'": self.decomp == "hadamard"}
        for what, on in never_reset.items():
            if on and self.reset_interval is not None:
                raise ValueError(f"{what} needs reset_interval=None (a reset would change the model), "
                                 f"got reset_interval={self.reset_interval!r}")
        if self.fedhm and not (self.decomp == "mat" and self.pattern == "ab" and self.zero_base):
            raise ValueError("fedhm=True needs decomp='mat', pattern='ab', zero_base=True, "
                             f"got decomp={self.decomp!r}, pattern={self.pattern!r}, zero_base={self.zero_base!r}")

    @property
    def scale(self) -> float | str:
        """The effective ``init_scale`` (:data:`DEFAULT_INIT_SCALE` when None; ``"auto"`` as given)."""
        if self.init_scale == "auto":
            return "auto"
        return float(self.init_scale) if self.init_scale is not None else DEFAULT_INIT_SCALE[self.decomp]

    def with_overrides(self, overrides: Mapping[str, Any]) -> "FedMUDConfig":
        """A copy with ``overrides`` applied (validated; unknown keys raise ``ValueError``)."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"unknown FedMUD setting(s) {unknown}; valid: {sorted(names)}")
        return replace(self, **dict(overrides))

    # ------------------------------------------------------------------ wire form
    def to_wire(self, **extra: Any) -> str:
        """JSON text of the settings the clients need (plus ``extra``, e.g. the per-layer ratio)."""
        return json.dumps({**asdict(self), **extra}, sort_keys=True)

    @classmethod
    def from_wire(cls, text: str) -> tuple["FedMUDConfig", dict[str, Any]]:
        """Inverse of :meth:`to_wire`: the config and the extra entries."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as err:
            raise ValueError(f"the 'fedmud' config entry is not valid JSON ({err})") from None
        if not isinstance(data, dict):
            raise ValueError("the 'fedmud' config entry must be a JSON object")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names}), {k: v for k, v in data.items() if k not in names}



def _baseline(what: str) -> dict[str, str]:
    """The sources of a low-rank baseline's structural settings (host paper, Sec. 5.1)."""
    source = f"paper: host paper (FedMUD) Sec. 5.1 (Baselines): {what}"
    return {"decomp": source, "pattern": source, "reset_interval": f"{source}; None = never reset",
            "zero_base": source, "random_right": source}


# method name -> config: the six FedMUD variants and the low-rank baselines
METHOD_CONFIGS: dict[str, FedMUDConfig] = {
    "fedmud": FedMUDConfig(),  # FedMUD+BKD+AAD, the paper's best; every setting overridable
    **{name: FedMUDConfig(decomp=d, pattern=p) for name, (d, p) in VARIANTS.items()},
    "fedlmt": sourced(FedMUDConfig(decomp="mat", pattern="ab", reset_interval=None, zero_base=True, random_right=True,
                                   init_scale=0.5), **_baseline("FedLMT trains a pre-decomposed model U@V"),
                      init_scale="project: the paper tunes a (Sec. 5.1) and does not report FedLMT's; U@V at about "
                                 "PyTorch's weight scale"),
    "fedpara": sourced(FedMUDConfig(decomp="hadamard", pattern="ab", reset_interval=None, zero_base=True,
                                    init_scale=0.8),
                       **{k: v for k, v in _baseline("FedPara's low-rank Hadamard product (X1@Y1)*(X2@Y2)").items()
                          if k != "random_right"},
                       init_scale="project: the paper tunes a (Sec. 5.1) and does not report FedPara's; (X1Y1)*(X2Y2) "
                                  "at about PyTorch's weight scale"),
    "fedhm": sourced(FedMUDConfig(decomp="mat", pattern="ab", reset_interval=None, zero_base=True, random_right=True,
                                  fedhm=True, base_init="kaiming"),
                     **_baseline("FedHM factorises the server's model by truncated SVD"),
                     fedhm="paper: host paper (FedMUD) Sec. 5.1 (Baselines): FedHM's server-side SVD",
                     base_init="project: PyTorch's default init; a rank-r SVD of Normal(0, 0.01) weights leaves the "
                               "network silent"),
}
