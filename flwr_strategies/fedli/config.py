"""Hyperparameters of FedLi-LS, FedLi-LU, FedExP and SCAFFOLD (frozen, validated on construction).

Every config defaults to its paper's setting (the FedLi paper, Sec. 3, Alg. 1-4, App. C; FedExP and SCAFFOLD as
the FedLi paper runs them) and has a :meth:`code` constructor giving the official code's setting:

- FedLi-LS: ``sls``'s line search as the official FedSLS code instantiates it
  (dcll-iiitd/FederatedLineSearch, ``Sls(net.parameters())``);
- FedLi-LU: the authors' FedML DFW constants (zk23du/FedLi ``FEDDFW``);
- FedExP and SCAFFOLD: the FedExP code (Divyansh03/FedExP, shared by FederatedLineSearch).

The training settings that go with each (learning rate, steps, batch, clipping...) are the
registered methods' ``train_defaults``; :data:`flwr_strategies.fedli.registration.CODE_TRAIN`
holds the official code's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.aggregation import WEIGHTINGS
from ..core.declare import setting
from ..core.validation import check_choice, check_flag, check_integer, check_range
from .armijo import ArmijoConfig
from .dfw import DFW_PRESETS, DFWConfig
from .server_ls import validate_step_size_sync

_WEIGHTED = ("paper: Sec. 1 and Alg. 1 (a weighted average of the clients' updates), weights n_i as the official "
             "code (fedml/simulation/FedLi/fedlils_api.py)")

__all__ = ["FedLiLSConfig", "FedLiLUConfig", "FedExPConfig", "ScaffoldConfig", "FedLiVariantConfig", "VARIANTS", "LOSS_REPORTS", "EPS_SCALINGS",
           "CONTROL_STATES"]

LOSS_REPORTS = ("epoch_mean", "initial", "final")
EPS_SCALINGS = ("none", "clients")
CONTROL_STATES = ("client", "server")
#: The constants a FedLi-family method runs from the command line (:class:`FedLiVariantConfig`).
VARIANTS = ("paper", "code")


@dataclass(frozen=True)
class FedLiLSConfig:
    """FedLi-LS (Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated Learning",
    Alg. 1 with Armijo-SGD clients and the GD server step). ``armijo``, the clients' line-search
    constants, is sent in every round's config; its defaults are ``sls``'s (the paper names the
    constants without values), capped at ``eta_max`` as the theory assumes."""

    step_size_sync: str | float = setting("unit", "'unit', 'max' or a float > 0",
                                          "paper: Sec. 3 (a unit server step guarantees descent; the official "
                                          "fedlils_api.py averages); Sec. 3's non-convex heuristic is "
                                          "step_size_sync='max'",
                                          "``eta_g`` of ``w_{t+1} = w_t - eta_g Delta_t``: ``unit`` (1.0; the "
                                          "convergence theory, the appendix and the code; the update is then "
                                          "FedAvg's weighted average), ``max`` (largest reported client step size, "
                                          "the paper's non-convex heuristic) or a constant float > 0.")
    weighting: str = setting("num_examples", "num_examples, uniform", _WEIGHTED,
                             "``p_i``: ``num_examples`` (``n_i / sum n_j``, code and prose) or ``uniform`` (Alg. 1).")
    armijo: ArmijoConfig = field(default_factory=ArmijoConfig)

    def __post_init__(self) -> None:
        object.__setattr__(self, "step_size_sync", validate_step_size_sync(self.step_size_sync))
        check_choice("weighting", self.weighting, WEIGHTINGS)
        if not isinstance(self.armijo, ArmijoConfig):
            raise ValueError(f"armijo must be an ArmijoConfig, got {type(self.armijo).__name__}")

    @classmethod
    def code(cls) -> FedLiLSConfig:
        """The official FedSLS code: unit server step, ``n_i`` weights, ``sls`` line search
        (growth ``2 ** (1/500)`` per step from step 1, uncapped)."""
        return cls(step_size_sync="unit", weighting="num_examples", armijo=ArmijoConfig.code())


@dataclass(frozen=True)
class FedLiLUConfig:
    """FedLi-LU (same paper, Alg. 1 with SGD clients and Alg. 2, the Deep Frank-Wolfe server step).
    ``dfw``, the server constants, defaults to App. C's (eta 1, lambda 1e-3) with no momentum as
    Alg. 2; ``DFWConfig.preset("code")`` gives the authors' code (eta 0.01, lambda 1e-5, mu 0.9)."""

    dfw: DFWConfig = field(default_factory=DFWConfig)
    loss_report: str = setting("epoch_mean", "epoch_mean, initial, final", "official code: the epoch's mean minibatch loss "
                                                                 "(fedml/ml/trainer/my_model_trainer_classification.py), "
                                                                 "Sec. 7's logged train loss",
                               "The loss the clients report for FunctionSync: mean minibatch loss of the local epoch "
                               "(the code, the logged train loss), ``initial`` (loss of ``w_t`` on the local data) or "
                               "``final`` (loss of the local model; Alg. 1 writes the value at the end of the local "
                               "work).")
    weighting: str = setting("num_examples", "num_examples, uniform", _WEIGHTED,
                             "``p_i`` for the model average and FunctionSync.")

    def __post_init__(self) -> None:
        if not isinstance(self.dfw, DFWConfig):
            raise ValueError(f"dfw must be a DFWConfig, got {type(self.dfw).__name__}")
        check_choice("loss_report", self.loss_report, LOSS_REPORTS)
        check_choice("weighting", self.weighting, WEIGHTINGS)

    @classmethod
    def code(cls) -> FedLiLUConfig:
        """The authors' FedML code: DFW eta 0.01, lambda 1e-5, momentum 0.9 (kept across rounds)."""
        return cls(dfw=DFW_PRESETS["code"], loss_report="epoch_mean", weighting="num_examples")


@dataclass(frozen=True)
class FedExPConfig:
    """FedExP (Jhunjhunwala, Wang, Joshi, "FedExP: Speeding Up Federated Averaging via
    Extrapolation", ICLR 2023): ``eta_g = max(1, 0.5 sum_i p_i ||Delta_i||^2 / (||Dbar||^2 + eps_t))``."""

    eps: float = setting(1e-3, "> 0, finite", "paper: host paper (FedLi) App. C: eps = 1e-3, the best of the grid "
                                              "{1e-3, 10^-2.5, 1e-2, 10^-1.5, 1e-1}",
                         "Stabiliser ``eps`` of the denominator.")
    eps_scaling: str = setting("none", "none, clients", "paper: host paper (FedLi) App. C runs FedExP's step "
                                                         "max(1, sum ||D_i||^2 / (2S(||Dbar||^2 + eps))); the "
                                                         "official FedExP code's S * eps is variant=code",
                               "``none``: the paper's ``||Dbar||^2 + eps``; ``clients``: the official code's "
                               "``||Dbar||^2 + S * eps`` (S = number of replies aggregated this round).")
    eps_decay: float = setting(1.0, "(0, 1]", "paper: host paper (FedLi) App. C gives a constant eps; the official "
                                              "code's 0.998^2 decay per round is variant=code",
                               "``eps_t = eps * eps_decay ** t`` in round t (1-based). The official code decays eps "
                               "by ``0.998 ** 2`` per round (with its client lr decayed by 0.998).")
    weighting: str = setting("uniform", "uniform, num_examples", "paper: FedExP (Jhunjhunwala et al., ICLR 2023) "
                                                                 "Alg. 1: the uniform mean over the S clients; n_i "
                                                                 "weights are variant=code",
                             "``p_i``: ``uniform`` (the paper, ``1/S``) or ``num_examples`` (the code, "
                             "``n_i / sum n_j``).")
    eval_last2_avg: bool = setting(False, "bool",
                                   "paper: host paper (FedLi) Sec. 7 evaluates the global model; the official code's "
                                   "average of the last two models is variant=code",
                                   "Evaluate the average of the last two global models (the code's reported model, "
                                   "from round 2 on; the training continues from the last one).")

    def __post_init__(self) -> None:
        check_range("eps", self.eps, 0.0)
        check_choice("eps_scaling", self.eps_scaling, EPS_SCALINGS)
        check_range("eps_decay", self.eps_decay, 0.0, 1.0, low_open=True)
        check_choice("weighting", self.weighting, WEIGHTINGS)
        check_flag("eval_last2_avg", self.eval_last2_avg)

    def eps_at(self, server_round: int, num_replies: int) -> float:
        """``eps`` used in ``server_round`` with ``num_replies`` aggregated replies."""
        value = float(self.eps) * float(self.eps_decay) ** int(server_round)
        return value * num_replies if self.eps_scaling == "clients" else value

    @classmethod
    def code(cls, eps: float = 1e-3) -> FedExPConfig:
        """The official FedExP code: ``S * eps`` decayed by ``0.998**2`` per round, ``n_i`` weights,
        the average of the last two models evaluated."""
        return cls(eps=eps, eps_scaling="clients", eps_decay=0.998**2, weighting="num_examples", eval_last2_avg=True)


@dataclass(frozen=True)
class ScaffoldConfig:
    """SCAFFOLD, option II (Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for
    Federated Learning", ICML 2020), as the FedLi paper's baseline."""

    server_lr: float = setting(1.0, "> 0, finite", "paper: host paper (FedLi) App. C (eta_g = 1)",
                               "``eta_g`` of ``w_{t+1} = w_t + eta_g mean_i(w_i - w_t)`` (the FedLi paper and the code "
                               "use 1).")
    control_state: str = setting("client", "client, server", "project: each client keeps c_i in its context.state, "
                                                             "so the server holds no per-client table",
                                 "Where the client controls ``c_i`` live: ``client`` (each client's "
                                 "``context.state``; the server keeps no per-client table, so 10,000 clients cost the "
                                 "server nothing extra) or ``server`` (a table keyed by partition id on the server, "
                                 "sent down with the model: one extra model copy per client and message; for runtimes "
                                 "without persistent client state).")
    weighting: str = setting("uniform", "uniform, num_examples", "paper: SCAFFOLD (Karimireddy et al., ICML 2020) "
                                                                 "Alg. 1 (uniform means); the FedExP code's n_i "
                                                                 "weights are variant=code",
                             "``uniform``: the paper's means; ``num_examples``: the FedExP code's, models weighted by "
                             "``n_i / sum_S n_j`` and ``c <- c + sum_i (n_i / total_examples) dc_i`` (needs "
                             "``total_examples``).")
    total_examples: int | None = setting(None, ">= 1 or None", "project: None = unknown; needed only with "
                                                               "weighting='num_examples'",
                                         "Training examples over all N clients (``num_examples`` weighting only).")
    correction_in_clip: bool = setting(False, "bool", "project: clip the data gradient, then add the correction; the "
                                                      "official code clips the corrected gradient (variant=code)",
                                       "Clients clip ``g - c_i + c`` (the code: the correction is part of the loss) "
                                       "instead of ``g`` alone before adding the correction.")

    def __post_init__(self) -> None:
        check_range("server_lr", self.server_lr, 0.0, low_open=True)
        check_choice("control_state", self.control_state, CONTROL_STATES)
        check_choice("weighting", self.weighting, WEIGHTINGS)
        check_flag("correction_in_clip", self.correction_in_clip)
        if self.total_examples is not None:
            check_integer("total_examples", self.total_examples, 1)
        if self.weighting == "num_examples" and self.total_examples is None:
            raise ValueError("weighting='num_examples' needs total_examples (training examples over all clients)")

    @classmethod
    def code(cls, total_examples: int, control_state: str = "client") -> ScaffoldConfig:
        """The FedExP code's SCAFFOLD: ``n_i`` weights for models and controls, correction clipped."""
        return cls(server_lr=1.0, control_state=control_state, weighting="num_examples",
                   total_examples=int(total_examples), correction_in_clip=True)


@dataclass(frozen=True)
class FedLiVariantConfig:
    """Which constants a FedLi-family method runs from the command line (``--set variant=``)."""

    variant: str = setting("paper", "paper, code", "project: 'paper' = the paper's method constants; 'code' = the "
                                                   "official code's (the fedli-code preset)",
                           "``paper``: the paper's method constants (each config's defaults); ``code``: the official "
                           "code's (:meth:`FedLiLSConfig.code` and the others). A setting given explicitly with a "
                           "value other than its paper default overrides the variant's.")

    def __post_init__(self) -> None:
        check_choice("variant", self.variant, VARIANTS)
