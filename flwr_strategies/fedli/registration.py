"""Registrations: ``fedli-ls``, ``fedli-lu``, ``fedexp`` and ``scaffold`` (cores in :mod:`.server`).

Every method has a ``variant`` parameter: ``"paper"`` (default) or ``"code"`` (the official code's
method constants, :meth:`FedLiLSConfig.code` etc.). Any other parameter set to a value different
from its paper default overrides the variant's value. The official code's training settings
(learning rate, steps, batch, clipping...) are in :data:`CODE_TRAIN`; the ``fedli-code`` preset
applies both.
"""

from __future__ import annotations

from typing import Any

from ..registry import MethodSpec, core_kwargs, register_method
from ..setup import ServerSetup

__all__ = ["CODE_TRAIN", "PAPER", "code_variant"]

PAPER = "Geetika, Uniyal, Chatterjee, 'Towards Hyper-parameter-free Federated Learning'"
CLIENTS = "flwr_strategies.clients.fedli"


_SEC7 = "paper: FedLi Sec. 7 (Implementation)"
#: The paper's 100 clients with 10 per round (Sec. 7, App. C); on the default dataset a reduced setting
#: that keeps the paper's 10 clients per round.
_REDUCED = ("project: reduced setting for digits (1,438 training examples): at the paper's 100 clients each holds "
            "about 14 examples, one batch, and the SGD methods barely move in 5 rounds; 10 clients, all training, keep "
            "the paper's 10 clients per round (--num-clients 100 --fraction-fit 0.1 is the paper's)")
_PARTICIPATION: dict[str, tuple[Any, str]] = {
    "num_clients": ({"digits": (10, _REDUCED), "*": (100, f"{_SEC7}: 100 clients")}, _SEC7),
    "fraction_fit": ({"digits": (1.0, _REDUCED), "*": (0.1, f"{_SEC7}: 10 of the 100 clients per round")}, _SEC7),
}
#: The paper's training settings (Sec. 7, App. C) for the SGD-client methods.
_SGD_PAPER: dict[str, tuple[Any, str]] = {
    "lr": (0.01, "paper: FedLi App. C (client lr 1e-2, the best of the grid {1e-2, 1e-1, 1})"),
    "lr_decay": (1.0, "project: the paper states no schedule (Sec. 7), so the rate is constant"),
    "local_epochs": (1, f"{_SEC7}: K = 1 local epoch"),
    "batch_size": (32, f"{_SEC7}: batch 32"),
    "weight_decay": (0.0, "official code: fedml/ml/trainer/my_model_trainer_classification.py (client SGD without "
                          "weight decay; App. C's 1e-3 is FedLi-LU's server lambda)"),
    "momentum": (0.0, "official code: fedml/ml/trainer/my_model_trainer_classification.py (plain client SGD)"),
    "grad_clip": (1.0, "project: App. C uses clipping without a threshold; max-norm 1.0 as the official code's "
                       "commented-out clip_grad_norm_(..., 1.0) (my_model_trainer_classification.py)"),
    **_PARTICIPATION,
}
_NOT_FOR_ARMIJO = ("project: the Armijo clients' sufficient-decrease test is on the plain minibatch loss (Alg. 3); "
                   "weight decay, momentum or clipping would break it")
_ARMIJO_PAPER: dict[str, tuple[Any, str]] = {
    "local_epochs": (1, f"{_SEC7}: K = 1 local epoch"),
    "batch_size": (32, f"{_SEC7}: batch 32"),
    "weight_decay": (0.0, _NOT_FOR_ARMIJO),
    "momentum": (0.0, _NOT_FOR_ARMIJO),
    "grad_clip": (None, _NOT_FOR_ARMIJO),
    **_PARTICIPATION,
}

#: The official code's training settings (what the ``fedli-code`` preset runs with ``variant="code"``):
#:
#: - FedLi-LS, FedExP, SCAFFOLD: dcll-iiitd/FederatedLineSearch ``main.py`` (= Divyansh03/FedExP's): 20 local
#:   steps (``"cp": 20``) of batch 50 (``"bs": 50``), lr 0.01 decayed by 0.998 before every round (round 1
#:   already trains at 0.01 * 0.998), weight decay 1e-4 and clipping at max-norm 10 for the SGD clients, 20 of
#:   100 clients (``--num_participating_clients 20``, the FedSLS paper's setting). The SLS clients
#:   (``LocalUpdate_Sls`` in ``utils_general.py``) take neither a learning rate nor weight decay; their
#:   ``clip_grad_norm_`` call acts on a gradient that ``Sls.step`` recomputes through its closure, so no
#:   clipping reaches the line search.
#: - FedLi-LU: zk23du/FedLi (FedML), ``config_file_*.yaml`` and ``my_model_trainer_classification.py``: 1 epoch
#:   of batch 32 at lr 0.01, plain SGD, no clipping (``clip_grad_norm_(..., 1.0)`` is commented out), 10 of
#:   100 clients.
#:
#: ``"none"`` switches an optional setting off (a preset's None would leave the method's default).
CODE_TRAIN: dict[str, dict[str, Any]] = {
    "fedli-ls": {"local_steps": 20, "local_epochs": "none", "batch_size": 50, "fraction_fit": 0.2,
                 "weight_decay": 0.0, "momentum": 0.0, "grad_clip": "none"},
    "fedli-lu": {"lr": 0.01, "lr_decay": 1.0, "local_epochs": 1, "local_steps": "none", "batch_size": 32,
                 "weight_decay": 0.0, "momentum": 0.0, "grad_clip": "none", "fraction_fit": 0.1},
    "fedexp": {"lr": 0.01 * 0.998, "lr_decay": 0.998, "local_steps": 20, "local_epochs": "none", "batch_size": 50,
               "weight_decay": 1e-4, "momentum": 0.0, "grad_clip": 10.0, "fraction_fit": 0.2},
    "scaffold": {"lr": 0.01 * 0.998, "lr_decay": 0.998, "local_steps": 20, "local_epochs": "none", "batch_size": 50,
                 "weight_decay": 1e-4, "momentum": 0.0, "grad_clip": 10.0, "fraction_fit": 0.2},
}


def code_variant(strategy: str):
    """``derive`` of a FedLi-family method: under ``variant=code``, the official code's value
    (``Config.code()``) of every setting left at its paper default; a setting given explicitly with
    another value keeps it. SCAFFOLD's ``total_examples`` is the partitions' total under
    ``weighting=num_examples``."""
    def derive(params: dict, setup: ServerSetup | None) -> dict[str, Any]:
        from ..core.declare import declared
        from ..registry import load_object

        config = load_object(_STRATEGY + strategy).hyperparameters["config"]
        total = (sum(int(n) for n in setup.num_examples.values()) or None) if setup is not None else None
        out: dict[str, Any] = {}
        if params["variant"] == "code":
            code = declared(config.code(total or 1) if strategy == "Scaffold" else config.code())
            out = {k: code[k][0] for k, (default, _, _) in declared(config).items()
                   if k in params and params[k] == default and k in code}
        if strategy == "Scaffold":
            out["total_examples"] = total if out.get("weighting", params["weighting"]) == "num_examples" else None
        return out

    return derive


def _reject_for_armijo(setup: ServerSetup, params: dict) -> dict[str, Any]:
    train = setup.train
    for name, value, ok in (("weight_decay", train.weight_decay, train.weight_decay == 0),
                            ("momentum", train.momentum, train.momentum == 0),
                            ("grad_clip", train.grad_clip, train.grad_clip is None)):
        if not ok:
            raise ValueError(f"fedli-ls clients run an Armijo line search and do not support {name}={value!r} "
                             "(it would break the sufficient-decrease test of Alg. 3); leave it unset")
    return core_kwargs(setup)


_STRATEGY = "flwr_strategies.fedli.strategy:"

#: ``(name, summary, paper, strategy class, client factory, training defaults)``.
METHODS = (
    ("fedli-ls", "FedLi-LS: Armijo line-search SGD on clients, server step 1 (or max client step); no lr to tune",
     PAPER, "FedLiLS", "ArmijoSGDClient", _ARMIJO_PAPER),
    ("fedli-lu", "FedLi-LU: SGD clients report loss; server makes a clipped Deep Frank-Wolfe step "
                 "(measured: step clipped at 1, i.e. FedAvg + server weight decay)",
     PAPER, "FedLiLU", "LossReportingSGDClient", _SGD_PAPER),
    ("fedexp", "FedExP: server extrapolation step max(1, sum||D_i||^2/(2S(||Dbar||^2+eps))) (eps=1e-3)",
     "Jhunjhunwala, Wang, Joshi, ICLR 2023", "FedExP", "SGDClient", _SGD_PAPER),
    ("scaffold", "SCAFFOLD (option II): control-variate corrected local SGD, c_i kept in context.state",
     "Karimireddy et al., ICML 2020", "Scaffold", "ScaffoldClient", _SGD_PAPER),
)

for _name, _summary, _paper, _strategy, _client, _train in METHODS:
    register_method(MethodSpec(
        name=_name, summary=_summary, paper=_paper, strategy=_STRATEGY + _strategy,
        settings=("flwr_strategies.fedli.config:FedLiVariantConfig",), derive=code_variant(_strategy),
        core_arguments=_reject_for_armijo if _name == "fedli-ls" else None, client=f"{CLIENTS}:{_client}",
        train_defaults=_train,
        derived={"total_examples": "the partitions' sizes, with weighting=num_examples"} if _name == "scaffold" else {}))
