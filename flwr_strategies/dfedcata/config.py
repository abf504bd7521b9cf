"""Hyperparameters of DFedCata and of its baselines' local rules (frozen, validated on construction).

Paper: Q. Li, M. Zhang, Y. Liu, Q. Yin, L. Shen, X. Cao, "Boosting the Performance of Decentralized
Federated Learning via Catalyst Acceleration", arXiv:2410.07272 (Algorithm 1, Sec. V-A).
Every impossible value raises ``ValueError`` naming the setting and the value.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.declare import setting
from ..core.validation import check_choice, check_flag, check_integer, check_number, check_range
from .params import ANCHORS, validate_dfedcata

__all__ = ["DFedCataConfig", "LocalRuleConfig", "CLIP_SCOPES", "CODE_OPTIONS"]

#: ``"data"``: clip the data gradient g, then add weight decay and the prox term (this project's
#: reading of Algorithm 1, line 7, which clips nothing);
#: ``"official"``: clip ``g - lam * anchor`` and add ``(lam + weight_decay) * x`` after the clip
#: (the official code: SGD weight decay ``lam + wd`` plus a linear ``-lam <x, anchor>`` loss term).
CLIP_SCOPES = ("data", "official")

#: Method settings that reproduce the official code's configuration (zzylyxx/DFedCata,
#: ``train_1.py`` defaults): its relaxed-initialisation rule and in-place client order, uniform
#: neighbourhood weights on the same random graphs, its clip scope and its beta 0.9. Together with
#: the training settings lr 0.1 x 0.998, 5 local epochs of batch 128, weight decay 5e-4, clip 10.
CODE_OPTIONS = {
    "beta": 0.9,
    "lam": 0.05,
    "extrapolation_anchor": "prev_local",
    "sequential_inplace": True,
    "topology": "random_code",
    "weights": "uniform",
    "allow_row_stochastic": True,
    "clip_scope": "official",
}


@dataclass(frozen=True)
class DFedCataConfig:
    """DFedCata's server-side hyperparameters (Algorithm 1)."""

    beta: float = setting(0.99, "[0, 1)", "paper: App. A-A, Table IV (beta = 0.99)",
                          "Nesterov (Catalyst) extrapolation coefficient between rounds (the official code's "
                          "default is 0.9; 0 disables the extrapolation).")
    lam: float = setting(0.05, ">= 0, lr * lam < 1", "paper: Sec. V-E, Fig. 5(d) (lambda = 0.05 is best)",
                         "Moreau-envelope penalty lambda of the local objective ``f_i(x) + lam/2 ||x - x_{i,0}||^2`` "
                         "(also the official default; 0 disables the proximal term). Sent to every peer as "
                         "``config[\"lam\"]``.")
    extrapolation_anchor: str = setting("prev_mixed", "prev_mixed, prev_local",
                                        "paper: Algorithm 1 (extrapolate between consecutive mixed models); the "
                                        "official code's prev_local is in the dfedcata-code preset",
                                        "``prev_mixed``: the paper's ``x_i^t + beta (x_i^t - x_i^{t-1})`` on "
                                        "consecutive mixed models; ``prev_local``: the official code's ``x_i^t + "
                                        "beta (x_i^t - x_{i,K}^{t-1})`` (the peer's own previous local model).")
    sequential_inplace: bool = setting(False, "bool",
                                       "paper: Algorithm 1 (clients in parallel); the official code's in-place "
                                       "order is in the dfedcata-code preset",
                                       "The official code's client order: peers train one after another in index "
                                       "order and each overwrites its row at once, so later peers mix this round's "
                                       "models of earlier neighbours. Runs one Flower round per peer (``m x T`` "
                                       "Flower rounds for T algorithm rounds). Order-dependent by design; for "
                                       "reproduction only.")
    lr: float | None = setting(None, "> 0 with lr * lam < 1, or None",
                               "project: None = checked each round when the round's lr is known",
                               "The largest local learning rate of the run (round 1), to check ``lr * lam < 1`` up "
                               "front; every round's ``lr`` is checked again when the round is configured.")

    def __post_init__(self) -> None:
        check_flag("sequential_inplace", self.sequential_inplace)
        validate_dfedcata(self.beta, self.lam, self.lr, self.extrapolation_anchor)

    def check_lr(self, lr: float, server_round: int) -> None:
        """Raise ``ValueError`` unless ``lr * lam < 1`` for this round's learning rate."""
        lr = check_number("lr", lr, "a finite number")
        if lr * self.lam >= 1.0:
            raise ValueError(f"round {server_round}: lr * lam = {lr * self.lam:.4g} must be < 1 "
                             f"(lr={lr!r}, lam={self.lam!r})")


@dataclass(frozen=True)
class LocalRuleConfig:
    """The local rule a decentralized peer runs (DFedCata and every baseline share one client)."""

    lam: float = setting(0.0, ">= 0", "project: no Moreau-envelope term unless the server sends one (DFedCata "
                                      "sends config['lam'])",
                         "Moreau-envelope penalty used when the server sends none (DFedCata sends "
                         "``config[\"lam\"]``).")
    local_momentum: float = setting(0.0, "[0, 1)", "project: plain local SGD unless a method asks for heavy-ball "
                                                   "momentum",
                                    "Heavy-ball coefficient of DFedAvgM's local SGD, reset every round (DFedAvgM: "
                                    "0.9, the official code's client momentum). The experiment's ``momentum`` "
                                    "setting is used when this is 0; setting both to different non-zero values is "
                                    "an error.")
    rho: float = setting(0.0, ">= 0", "project: no SAM perturbation unless a method asks for one",
                         "SAM perturbation radius (DFedSAM, FedSAM: 0.1).")
    steps_per_round: int = setting(0, ">= 0 (0: the run's local epochs or steps)",
                                   "project: 0 = the run's local epochs or steps budget",
                                   "If > 0, exactly this many minibatch steps per round (D-PSGD: 1), replacing the "
                                   "experiment's local epochs/steps.")
    clip_scope: str = setting("data", "data, official",
                              "project: clip the data gradient only; the official code clips g - lam*anchor "
                              "(client/dfedcata.py; clip_scope=official in the dfedcata-code preset)",
                              "What the gradient-norm clip bounds: ``data`` (this project's) or ``official`` (see "
                              ":data:`CLIP_SCOPES`). Only matters when clipping is on and ``lam > 0``.")

    def __post_init__(self) -> None:
        for name in ("lam", "rho"):
            check_range(name, getattr(self, name), 0.0)
        check_range("local_momentum", self.local_momentum, 0.0, 1.0, high_open=True)
        check_integer("steps_per_round", self.steps_per_round, 0)
        check_choice("clip_scope", self.clip_scope, CLIP_SCOPES)

    def momentum(self, train_momentum: float) -> float:
        """The heavy-ball coefficient to use given the experiment's ``momentum`` setting."""
        train_momentum = float(train_momentum or 0.0)
        if self.local_momentum and train_momentum and self.local_momentum != train_momentum:
            raise ValueError(f"local_momentum={self.local_momentum!r} and momentum={train_momentum!r} disagree; "
                             "set one of them")
        return float(self.local_momentum or train_momentum)

    @classmethod
    def from_params(cls, params: dict) -> "LocalRuleConfig":
        """From registry hyperparameters (keys that are not local-rule settings are ignored)."""
        return cls(**{k: params[k] for k in cls.__dataclass_fields__ if k in params})


__all__ += ["ANCHORS"]
