"""Registrations: ``fedli-ls``, ``fedli-lu``, ``fedexp`` and ``scaffold`` (cores in :mod:`.server`).

Every method has a ``variant`` parameter: ``"paper"`` (default) or ``"code"`` (the official code's
method constants, :meth:`FedLiLSConfig.code` etc.). Any other parameter set to a value different
from its paper default overrides the variant's value. The official code's training settings
(learning rate, steps, batch, clipping...) are in :data:`CODE_TRAIN`; the ``fedli-code`` preset
applies both.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..baselines.registration import core_kwargs
from ..registry import MethodSpec, register_method
from ..setup import ServerSetup
from .armijo import ArmijoConfig
from .config import FedExPConfig, FedLiLSConfig, FedLiLUConfig, ScaffoldConfig
from .dfw import DFWConfig
from .server import FedExPServer, FedLiLSServer, FedLiLUServer, ScaffoldServer

__all__ = ["CODE_TRAIN", "PAPER", "VARIANTS", "fedli_ls_config", "fedli_lu_config", "fedexp_config_from_params",
           "scaffold_config_from_params"]

PAPER = "Geetika, Uniyal, Chatterjee, 'Towards Hyper-parameter-free Federated Learning'"
VARIANTS = ("paper", "code")
CLIENTS = "flwr_strategies.clients.fedli"

_ARMIJO_DEFAULTS = dataclasses.asdict(ArmijoConfig())
_DFW_DEFAULTS = dataclasses.asdict(DFWConfig())

# The paper's training settings (spec 001 §7.1): 1 local epoch, batch 32, 10 of 100 clients per round,
# client SGD lr 0.01 (the grid's best), constant lr, no client weight decay (§10 A12), clipping "used"
# with no threshold given (max-norm 1.0 for SGD clients, never on Armijo clients, §10 A13).
_SGD_PAPER: dict[str, tuple[Any, str]] = {
    "lr": (0.01, "paper"),
    "lr_decay": (1.0, "spec"),
    "local_epochs": (1, "paper"),
    "batch_size": (32, "paper"),
    "weight_decay": (0.0, "spec"),
    "momentum": (0.0, "spec"),
    "grad_clip": (1.0, "spec"),
    "fraction_fit": (0.1, "paper"),
}
_ARMIJO_PAPER: dict[str, tuple[Any, str]] = {
    "local_epochs": (1, "paper"),
    "batch_size": (32, "paper"),
    "weight_decay": (0.0, "spec"),
    "momentum": (0.0, "spec"),
    "grad_clip": (None, "spec"),
    "fraction_fit": (0.1, "paper"),
}

#: The official code's training settings (dcll-iiitd/FederatedLineSearch = Divyansh03/FedExP's main.py:
#: 20 local steps of batch 50, lr 0.01 decayed by 0.998 per round, weight decay 1e-4, clipping at 10,
#: 20 of 100 clients; the SLS clients use none of lr / weight decay / clipping). FedLi-LU's FedML
#: code: 1 epoch of batch 32 at lr 0.01 with clipping commented out.
CODE_TRAIN: dict[str, dict[str, Any]] = {
    "fedli-ls": {"local_steps": 20, "local_epochs": None, "batch_size": 50, "fraction_fit": 0.2},
    "fedli-lu": {"lr": 0.01, "local_epochs": 1, "batch_size": 32, "grad_clip": None, "fraction_fit": 0.1},
    "fedexp": {"lr": 0.01 * 0.998, "lr_decay": 0.998, "local_steps": 20, "local_epochs": None, "batch_size": 50,
               "weight_decay": 1e-4, "grad_clip": 10.0, "fraction_fit": 0.2},
    "scaffold": {"lr": 0.01 * 0.998, "lr_decay": 0.998, "local_steps": 20, "local_epochs": None, "batch_size": 50,
                 "weight_decay": 1e-4, "grad_clip": 10.0, "fraction_fit": 0.2},
}


def _variant(params: dict) -> str:
    value = str(params.get("variant", "paper"))
    if value not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {value!r}")
    return value


def _pick(params: dict, paper: dict[str, Any], base: dict[str, Any], key: str) -> Any:
    """The variant's value unless the user set ``key`` to something other than the paper default."""
    if key in params and params[key] != paper[key]:
        return params[key]
    return base[key]


def fedli_ls_config(params: dict) -> FedLiLSConfig:
    """FedLi-LS config from resolved registry parameters."""
    base = FedLiLSConfig.code() if _variant(params) == "code" else FedLiLSConfig()
    armijo_base = dataclasses.asdict(base.armijo)
    armijo = ArmijoConfig(**{k: _pick(params, _ARMIJO_DEFAULTS, armijo_base, k) for k in _ARMIJO_DEFAULTS})
    sync = _pick(params, {"step_size_sync": "unit"}, {"step_size_sync": base.step_size_sync}, "step_size_sync")
    weighting = _pick(params, {"weighting": "num_examples"}, {"weighting": base.weighting}, "weighting")
    return FedLiLSConfig(step_size_sync=sync, weighting=weighting, armijo=armijo)


def fedli_lu_config(params: dict) -> FedLiLUConfig:
    """FedLi-LU config from resolved registry parameters."""
    base = FedLiLUConfig.code() if _variant(params) == "code" else FedLiLUConfig()
    dfw = DFWConfig(**{k: float(_pick(params, _DFW_DEFAULTS, dataclasses.asdict(base.dfw), k)) for k in _DFW_DEFAULTS})
    paper = {"loss_report": "epoch_mean", "weighting": "num_examples"}
    own = {"loss_report": base.loss_report, "weighting": base.weighting}
    return FedLiLUConfig(dfw=dfw, **{k: _pick(params, paper, own, k) for k in paper})


def fedexp_config_from_params(params: dict) -> FedExPConfig:
    """FedExP config from resolved registry parameters."""
    paper = dataclasses.asdict(FedExPConfig())
    base = dataclasses.asdict(FedExPConfig.code() if _variant(params) == "code" else FedExPConfig())
    return FedExPConfig(**{k: _pick(params, paper, base, k) for k in paper})


def scaffold_config_from_params(params: dict, total_examples: int | None) -> ScaffoldConfig:
    """SCAFFOLD config from resolved registry parameters (``total_examples`` from the experiment)."""
    keys = ("server_lr", "control_state", "weighting", "correction_in_clip")
    paper = {k: getattr(ScaffoldConfig(), k) for k in keys}
    if _variant(params) == "code":
        base = {k: getattr(ScaffoldConfig.code(total_examples or 1), k) for k in keys}
    else:
        base = dict(paper)
    values = {k: _pick(params, paper, base, k) for k in keys}
    total = total_examples if values["weighting"] == "num_examples" else None
    return ScaffoldConfig(**values, total_examples=total)


def _reject_for_armijo(setup: ServerSetup) -> None:
    train = setup.train
    for name, value, ok in (("weight_decay", train.weight_decay, train.weight_decay == 0),
                            ("momentum", train.momentum, train.momentum == 0),
                            ("grad_clip", train.grad_clip, train.grad_clip is None)):
        if not ok:
            raise ValueError(f"fedli-ls clients run an Armijo line search and do not support {name}={value!r} "
                             "(it would break the sufficient-decrease test, spec 001 §10 A13); leave it unset")


def _fedli_ls(setup: ServerSetup, params: dict) -> FedLiLSServer:
    _reject_for_armijo(setup)
    return FedLiLSServer(setup.initial_parameters, config=fedli_ls_config(params), **core_kwargs(setup))


def _fedli_lu(setup: ServerSetup, params: dict) -> FedLiLUServer:
    return FedLiLUServer(setup.initial_parameters, config=fedli_lu_config(params), **core_kwargs(setup))


def _fedexp(setup: ServerSetup, params: dict) -> FedExPServer:
    return FedExPServer(setup.initial_parameters, config=fedexp_config_from_params(params), **core_kwargs(setup))


def _scaffold(setup: ServerSetup, params: dict) -> ScaffoldServer:
    total = sum(int(n) for n in setup.num_examples.values()) or None
    config = scaffold_config_from_params(params, total)
    return ScaffoldServer(setup.initial_parameters, config=config, **core_kwargs(setup))


_COMMON = {"variant": "paper"}

register_method(MethodSpec(
    name="fedli-ls",
    summary="FedLi-LS: Armijo line-search SGD on clients, server step 1 (or max client step); no lr to tune",
    paper=PAPER,
    defaults={**_COMMON, "step_size_sync": "unit", "weighting": "num_examples", **_ARMIJO_DEFAULTS},
    build_core=_fedli_ls,
    client=f"{CLIENTS}:build_armijo_client",
    train_defaults=_ARMIJO_PAPER,
))
register_method(MethodSpec(
    name="fedli-lu",
    summary="FedLi-LU: SGD clients report loss; server makes a clipped Deep Frank-Wolfe step "
            "(measured: step clipped at 1, i.e. FedAvg + server weight decay)",
    paper=PAPER,
    defaults={**_COMMON, **_DFW_DEFAULTS, "loss_report": "epoch_mean", "weighting": "num_examples"},
    build_core=_fedli_lu,
    client=f"{CLIENTS}:build_loss_client",
    train_defaults=_SGD_PAPER,
))
register_method(MethodSpec(
    name="fedexp",
    summary="FedExP: server extrapolation step max(1, sum||D_i||^2/(2S(||Dbar||^2+eps))) (eps=1e-3)",
    paper="Jhunjhunwala, Wang, Joshi, ICLR 2023",
    defaults={**_COMMON, **dataclasses.asdict(FedExPConfig())},
    build_core=_fedexp,
    client=f"{CLIENTS}:build_sgd_client",
    train_defaults=_SGD_PAPER,
))
register_method(MethodSpec(
    name="scaffold",
    summary="SCAFFOLD (option II): control-variate corrected local SGD, c_i kept in context.state",
    paper="Karimireddy et al., ICML 2020",
    defaults={**_COMMON, "server_lr": 1.0, "control_state": "client", "weighting": "uniform", "correction_in_clip": False},
    build_core=_scaffold,
    client=f"{CLIENTS}:build_scaffold_client",
    train_defaults=_SGD_PAPER,
))
