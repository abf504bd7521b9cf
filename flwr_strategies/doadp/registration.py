"""Registrations: ``doadp``, ``dmsgd`` (non-private) and the paper's baselines ``dpdo``, ``dp-dda``, ``cpgt``.

Method hyperparameters (``--set key=value``) are the fields of each config dataclass in
:mod:`.config` plus the graph (``topology``, ``neighbours``, ``weights``, ``failure_policy``). From the
experiment: the step size alpha is ``lr`` (with ``lr_decay`` for DO-ADP / D-mSGD), the batch size b is ``batch_size``, T is the number of
rounds (one round = one iteration), q is the smallest local dataset. Training settings a peer method
does not have are rejected before training: ``weight_decay`` (none in Algorithm 1), ``momentum`` (use
``--set beta=``), ``grad_clip`` (use ``--set clip=``), more than one local step or epoch per round,
and ``fraction_fit`` below 1 (every agent takes part every round).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..registry import MethodSpec, register_method
from ..setup import ServerSetup
from .baseline_server import CPGTServer, DPDDAServer, DPDOServer
from .config import CPGTConfig, DMSGDConfig, DOADPConfig, DPDDAConfig, DPDOConfig
from .peer import PublicTableCore
from .server import DMSGDServer, DOADPServer

PAPER = ("Huo, Liu, Ding, Johansson, Shi, 'Decentralized Optimization with Amplified Privacy via "
         "Efficient Communication', arXiv 2506.07102")

GRAPH_DEFAULTS = {"topology": "circulant", "neighbours": 7, "weights": "auto", "failure_policy": "renormalize"}

#: The paper's training settings (CNN on MNIST, Sec. V-B) where it states them; the spec's choices else.
#: On the default dataset (scikit-learn digits) the paper's other workload applies: logistic regression
#: (Sec. V-A); lr 1.0 there is this project's choice, so that the few iterations of a short run
#: (one round = one iteration) move the model at the paper's epsilon.
TRAIN_DEFAULTS = {
    "num_clients": (20, "paper"),
    "model": ({"digits": "logreg"}, "paper"),
    "lr": ({"digits": (1.0, "project"), "*": (0.01, "paper")}, "paper"),
    "batch_size": (32, "spec"),
    "local_steps": (1, "paper"),
    "fraction_fit": (1.0, "paper"),
}


def _defaults(config_cls) -> dict[str, Any]:
    return {**{f.name: f.default for f in fields(config_cls)}, **GRAPH_DEFAULTS}


def _config(config_cls, params: dict[str, Any]):
    names = {f.name for f in fields(config_cls)}
    return config_cls(**{k: v for k, v in params.items() if k in names})


def check_train_settings(setup: ServerSetup, method: str) -> None:
    """Reject experiment settings a peer method does not have (clear error before training)."""
    tr = setup.train
    if setup.fraction_fit != 1.0:
        raise ValueError(f"{method} runs every agent every round; got fraction_fit={setup.fraction_fit}")
    if tr.weight_decay:
        raise ValueError(f"{method} has no weight decay (Algorithm 1); got weight_decay={tr.weight_decay}")
    if tr.momentum:
        raise ValueError(f"{method} has its own momentum (--set beta=...); got momentum={tr.momentum}")
    if tr.grad_clip is not None:
        raise ValueError(f"{method} clips per sample with --set clip=...; got grad_clip={tr.grad_clip}")
    for name in ("local_steps", "local_epochs"):
        value = getattr(tr, name)
        if value not in (None, 1):
            raise ValueError(f"{method}: one round is one iteration on one batch; got {name}={value}")
    if not setup.num_examples:
        raise ValueError(f"{method} needs the clients' dataset sizes (ServerSetup.num_examples) to calibrate its noise")


def _common(setup: ServerSetup, params: dict[str, Any], method: str) -> dict[str, Any]:
    check_train_settings(setup, method)
    return dict(num_partitions=setup.num_clients, num_rounds=setup.num_rounds,
                dataset_size=int(min(setup.num_examples.values())), alpha=setup.train.lr,
                batch_size=setup.train.batch_size, seed=setup.seed, on_train_config=setup.fit_config,
                **PublicTableCore.graph_arguments({k: params[k] for k in GRAPH_DEFAULTS}))


def _doadp(setup: ServerSetup, params: dict) -> DOADPServer:
    return DOADPServer(setup.initial_parameters, config=_config(DOADPConfig, params), lr_decay=setup.train.lr_decay,
                       **_common(setup, params, "doadp"))


def _dmsgd(setup: ServerSetup, params: dict) -> DMSGDServer:
    return DMSGDServer(setup.initial_parameters, config=_config(DMSGDConfig, params), lr_decay=setup.train.lr_decay,
                       **_common(setup, params, "dmsgd"))


def _dpdo(setup: ServerSetup, params: dict) -> DPDOServer:
    return DPDOServer(setup.initial_parameters, config=_config(DPDOConfig, params), lr_decay=setup.train.lr_decay,
                      **_common(setup, params, "dpdo"))


def _dpdda(setup: ServerSetup, params: dict) -> DPDDAServer:
    return DPDDAServer(setup.initial_parameters, config=_config(DPDDAConfig, params), lr_decay=setup.train.lr_decay,
                       **_common(setup, params, "dp-dda"))


def _cpgt(setup: ServerSetup, params: dict) -> CPGTServer:
    return CPGTServer(setup.initial_parameters, config=_config(CPGTConfig, params), lr_decay=setup.train.lr_decay,
                      **_common(setup, params, "cpgt"))


register_method(MethodSpec(
    name="doadp",
    summary="DO-ADP: decentralized momentum SGD, Gaussian DP noise, random activation (p) and Top-k messages "
            "(k/d); certified epsilon reported (dp_epsilon at dp_delta) beside Theorem 1's",
    paper=PAPER, defaults=_defaults(DOADPConfig), build_core=_doadp,
    client="flwr_strategies.clients.doadp:build_doadp_client", train_defaults=TRAIN_DEFAULTS, decentralized=True,
))
register_method(MethodSpec(
    name="dmsgd",
    summary="Decentralized momentum SGD (NOT private; DO-ADP's network with p=1, k=d, no noise, no clipping)",
    paper=PAPER, defaults=_defaults(DMSGDConfig), build_core=_dmsgd,
    client="flwr_strategies.clients.doadp:build_dmsgd_client", train_defaults=TRAIN_DEFAULTS, decentralized=True,
))
register_method(MethodSpec(
    name="dpdo",
    summary="DPDO (Huang et al. 2015), DO-ADP baseline: Laplace-perturbed broadcasts, decaying noise and step; "
            "pure eps-DP (certified)",
    paper="Huang, Mitra, Vaidya, ICDCN 2015 (baseline of " + PAPER + ")", defaults=_defaults(DPDOConfig),
    build_core=_dpdo, client="flwr_strategies.clients.doadp_baselines:build_dpdo_client",
    train_defaults=TRAIN_DEFAULTS, decentralized=True,
))
register_method(MethodSpec(
    name="dp-dda",
    summary="DP-DDA (Liu et al. 2024), DO-ADP baseline: private dual averaging with node sampling (p_s=0.24)",
    paper="Liu, Johansson, Shi, Automatica 2024 (baseline of " + PAPER + ")", defaults=_defaults(DPDDAConfig),
    build_core=_dpdda, client="flwr_strategies.clients.doadp_baselines:build_dpdda_client",
    train_defaults=TRAIN_DEFAULTS, decentralized=True,
))
register_method(MethodSpec(
    name="cpgt",
    summary="CPGT (Xie et al. 2023), DO-ADP baseline: compressed gradient tracking with Laplace noise "
            "(Top-k 0.12 per variable; heuristic, uncertified epsilon)",
    paper="Xie, Yi, Wang, Cao, Ren, IFAC 2023 (baseline of " + PAPER + ")", defaults=_defaults(CPGTConfig),
    build_core=_cpgt, client="flwr_strategies.clients.doadp_baselines:build_cpgt_client",
    train_defaults=TRAIN_DEFAULTS, decentralized=True,
))
